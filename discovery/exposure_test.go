package discovery

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// from decodes an object given as the API's JSON fields, as the watches'
// objects are decoded.
func from[T any](t *testing.T, obj map[string]any) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func svcOf(t *testing.T, typ string, port, nodePort int, ann map[string]string, lb ...string) *service {
	annotations := map[string]any{}
	for k, v := range ann {
		annotations[k] = v
	}
	var ports, ingress []any
	if port != 0 {
		ports = append(ports, map[string]any{"port": int64(port), "nodePort": int64(nodePort)})
	}
	for _, h := range lb {
		if strings.ContainsAny(h, "abcdefghijklmnopqrstuvwxyz") {
			ingress = append(ingress, map[string]any{"hostname": h})
		} else {
			ingress = append(ingress, map[string]any{"ip": h})
		}
	}
	return from[service](t, map[string]any{
		"metadata": map[string]any{"name": "keystone", "namespace": "openstack", "annotations": annotations},
		"spec":     map[string]any{"type": typ, "ports": ports},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}},
	})
}

func nodeOf(t *testing.T, name string, ready bool, addrs ...string) *node {
	st := "False"
	if ready {
		st = "True"
	}
	var as []any
	for i := 0; i+1 < len(addrs); i += 2 {
		as = append(as, map[string]any{"type": addrs[i], "address": addrs[i+1]})
	}
	return from[node](t, map[string]any{
		"metadata": map[string]any{"name": name},
		"status":   map[string]any{"addresses": as, "conditions": []any{map[string]any{"type": "Ready", "status": st}}},
	})
}

func ingressOf(t *testing.T, name, host, backend string, tls bool) *ingress {
	spec := map[string]any{"rules": []any{map[string]any{
		"host": host,
		"http": map[string]any{"paths": []any{map[string]any{"backend": map[string]any{"service": map[string]any{"name": backend}}}}},
	}}}
	if tls {
		spec["tls"] = []any{map[string]any{"hosts": []any{host}}}
	}
	return from[ingress](t, map[string]any{"metadata": map[string]any{"name": name}, "spec": spec})
}

func TestExposureOf(t *testing.T) {
	ready2 := []*node{nodeOf(t, "n2", true, "InternalIP", "10.0.0.2"), nodeOf(t, "n1", false, "ExternalIP", "192.0.2.1"), nodeOf(t, "n3", true, "ExternalIP", "192.0.2.3", "InternalIP", "10.0.0.3")}
	for _, tc := range []struct {
		name  string
		svc   *service
		nodes []*node
		ing   *ingress
		state State
		want  string // URL, or text of the detail
	}{
		{"no service", nil, nil, nil, Waiting, "does not exist"},
		{"load balancer ip", svcOf(t, "LoadBalancer", 5000, 31000, nil, "203.0.113.7"), nil, nil, Ready, "http://203.0.113.7:5000"},
		{"load balancer hostname", svcOf(t, "LoadBalancer", 443, 0, nil, "lb.example.org"), nil, nil, Ready, "https://lb.example.org"},
		{"load balancer pending", svcOf(t, "LoadBalancer", 5000, 31000, nil), nil, nil, Waiting, "LoadBalancer has no ingress yet"},
		{"floating ip annotation", svcOf(t, "LoadBalancer", 5000, 0, map[string]string{AnnotationPublicHost: "198.51.100.9", AnnotationPublicScheme: "https", AnnotationPublicPort: "443"}), nil, nil, Ready, "https://198.51.100.9"},
		{"node port, external ip of a ready node", svcOf(t, "NodePort", 5000, 30500, nil), ready2, nil, Ready, "http://192.0.2.3:30500"},
		{"node port, internal ip", svcOf(t, "NodePort", 5000, 30500, nil), ready2[:2], nil, Ready, "http://10.0.0.2:30500"},
		{"node port, no ready node", svcOf(t, "NodePort", 5000, 30500, nil), ready2[1:2], nil, Waiting, "no ready node has an address"},
		{"node port behind a VIP", svcOf(t, "NodePort", 5000, 30500, map[string]string{AnnotationPublicHost: "keystone.example.org"}), nil, nil, Ready, "http://keystone.example.org:30500"},
		{"cluster ip with no ingress", svcOf(t, "", 5000, 0, nil), nil, nil, Failed, "service openstack/keystone is of type ClusterIP and no Ingress keystone exposes it"},
		{"ingress", svcOf(t, "ClusterIP", 5000, 0, nil), nil, ingressOf(t, "keystone", "keystone.example.org", "keystone", false), Ready, "http://keystone.example.org"},
		{"ingress with tls", svcOf(t, "ClusterIP", 5000, 0, nil), nil, ingressOf(t, "keystone", "keystone.example.org", "keystone", true), Ready, "https://keystone.example.org"},
		{"ingress for another service", svcOf(t, "ClusterIP", 5000, 0, nil), nil, ingressOf(t, "keystone", "keystone.example.org", "glance", false), Failed, "Ingress keystone has no rule with a host for service keystone"},
		{"external name", svcOf(t, "ExternalName", 5000, 0, nil), nil, nil, Failed, "is of type ExternalName"},
		{"no ports", svcOf(t, "LoadBalancer", 0, 0, nil, "203.0.113.7"), nil, nil, Failed, "has no ports"},
		{"bad scheme", svcOf(t, "LoadBalancer", 5000, 0, map[string]string{AnnotationPublicScheme: "ftp"}, "203.0.113.7"), nil, nil, Failed, `kolla.openstack.org/public-scheme: "ftp"`},
		{"bad port", svcOf(t, "LoadBalancer", 5000, 0, map[string]string{AnnotationPublicPort: "http"}, "203.0.113.7"), nil, nil, Failed, `kolla.openstack.org/public-port: "http" is not a port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, o := exposureOf("service openstack/keystone", tc.svc, Exposure{}, tc.nodes, fronts{route: "keystone", ingress: "keystone", ing: tc.ing, complete: true})
			if o.State != tc.state {
				t.Fatalf("state %s (%s), want %s", o.State, o.Detail, tc.state)
			}
			if tc.state == Ready {
				if got := e.URL(""); got != tc.want {
					t.Errorf("URL %q, want %q", got, tc.want)
				}
			} else if !strings.Contains(o.Detail, tc.want) {
				t.Errorf("detail %q, want it to contain %q", o.Detail, tc.want)
			}
		})
	}
}

// The agent's exposure config wins over the annotations and over what the
// cluster reports, field by field; a NodePort Service behind a configured
// VIP keeps its nodePort unless a port is configured.
func TestExposureOverride(t *testing.T) {
	nodes := []*node{nodeOf(t, "n1", true, "ExternalIP", "192.0.2.1")}
	ann := map[string]string{AnnotationPublicHost: "198.51.100.9", AnnotationPublicScheme: "https", AnnotationPublicPort: "443"}
	for _, tc := range []struct {
		name string
		svc  *service
		ov   Exposure
		want string
		via  string
	}{
		{"floating ip over the load balancer", svcOf(t, "LoadBalancer", 5000, 0, nil, "203.0.113.7"), Exposure{Host: "198.51.100.10"}, "http://198.51.100.10:5000", "agent config"},
		{"config over annotations", svcOf(t, "LoadBalancer", 5000, 0, ann, "203.0.113.7"), Exposure{Host: "198.51.100.10", Port: 8443}, "https://198.51.100.10:8443", "agent config"},
		{"scheme and port only", svcOf(t, "LoadBalancer", 5000, 0, nil, "203.0.113.7"), Exposure{Scheme: "https", Port: 443}, "https://203.0.113.7", "LoadBalancer ingress"},
		{"node port behind a configured VIP", svcOf(t, "NodePort", 5000, 30500, nil), Exposure{Host: "keystone.example.org"}, "http://keystone.example.org:30500", "agent config"},
		{"node port, VIP and port configured", svcOf(t, "NodePort", 5000, 30500, nil), Exposure{Host: "keystone.example.org", Port: 443, Scheme: "https"}, "https://keystone.example.org", "agent config"},
		{"node port, port only", svcOf(t, "NodePort", 5000, 30500, nil), Exposure{Port: 80}, "http://192.0.2.1", "NodePort on node n1"},
		{"cluster ip with a configured host", svcOf(t, "ClusterIP", 5000, 0, nil), Exposure{Host: "keystone.example.org"}, "http://keystone.example.org:5000", "agent config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, o := exposureOf("service openstack/keystone", tc.svc, tc.ov, nodes, fronts{complete: true})
			if o.State != Ready {
				t.Fatalf("state %s (%s), want ready", o.State, o.Detail)
			}
			if got := e.URL(""); got != tc.want || e.Via != tc.via {
				t.Errorf("URL %q via %q, want %q via %q", got, e.Via, tc.want, tc.via)
			}
		})
	}
}

func TestExposureURL(t *testing.T) {
	for _, tc := range []struct {
		e    Exposure
		path string
		want string
	}{
		{Exposure{Scheme: "http", Host: "10.0.0.1", Port: 80}, "/v3", "http://10.0.0.1/v3"},
		{Exposure{Scheme: "https", Host: "k.example.org", Port: 443}, "v3", "https://k.example.org/v3"},
		{Exposure{Scheme: "https", Host: "2001:db8::1", Port: 5000}, "/v3", "https://[2001:db8::1]:5000/v3"},
		{Exposure{Scheme: "http", Host: "k", Port: 0}, "", "http://k"},
	} {
		if got := tc.e.URL(tc.path); got != tc.want {
			t.Errorf("%+v %q: %q, want %q", tc.e, tc.path, got, tc.want)
		}
	}
}

func routeOf(t *testing.T, name, host, to string, tls, admitted bool) *route {
	st := "False"
	if admitted {
		st = "True"
	}
	spec := map[string]any{"host": host, "to": map[string]any{"kind": "Service", "name": to}}
	if tls {
		spec["tls"] = map[string]any{"termination": "edge"}
	}
	return from[route](t, map[string]any{
		"metadata": map[string]any{"name": name},
		"spec":     spec,
		"status": map[string]any{"ingress": []any{map[string]any{
			"host": host, "conditions": []any{map[string]any{"type": "Admitted", "status": st}},
		}}},
	})
}

func TestRouteExposure(t *testing.T) {
	svc := svcOf(t, "ClusterIP", 5000, 0, nil)
	for _, tc := range []struct {
		name  string
		f     fronts
		state State
		want  string
	}{
		{"admitted", fronts{rt: routeOf(t, "keystone", "keystone.apps.example.org", "keystone", false, true), complete: true}, Ready, "http://keystone.apps.example.org"},
		{"admitted with tls", fronts{rt: routeOf(t, "keystone", "keystone.apps.example.org", "keystone", true, true), complete: true}, Ready, "https://keystone.apps.example.org"},
		{"not admitted", fronts{rt: routeOf(t, "keystone", "keystone.apps.example.org", "keystone", false, false), complete: true}, Waiting, "Route keystone is not admitted by a router yet"},
		{"another service", fronts{rt: routeOf(t, "keystone", "keystone.apps.example.org", "glance", false, true), complete: true}, Failed, "Route keystone routes to Service glance, not to this Service"},
		{"route wins over ingress", fronts{rt: routeOf(t, "keystone", "r.example.org", "keystone", false, true), ing: ingressOf(t, "keystone", "i.example.org", "keystone", false), complete: true}, Ready, "http://r.example.org"},
		{"not listed yet", fronts{route: "keystone", ingress: "keystone"}, Waiting, "looking for a Route or Ingress"},
		{"neither", fronts{route: "keystone", ingress: "keystone", routesServed: true, complete: true}, Failed, "no Route keystone or Ingress keystone exposes it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, o := exposureOf("service openstack/keystone", svc, Exposure{}, nil, tc.f)
			if o.State != tc.state {
				t.Fatalf("state %s (%s), want %s", o.State, o.Detail, tc.state)
			}
			if tc.state == Ready {
				if got := e.URL(""); got != tc.want {
					t.Errorf("URL %q, want %q", got, tc.want)
				}
			} else if !strings.Contains(o.Detail, tc.want) {
				t.Errorf("detail %q, want it to contain %q", o.Detail, tc.want)
			}
		})
	}
}
