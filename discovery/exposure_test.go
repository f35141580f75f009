package discovery

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svcOf(typ string, port, nodePort int, ann map[string]string, lb ...string) *service {
	s := &service{ObjectMeta: metav1.ObjectMeta{Name: "keystone", Namespace: "openstack", Annotations: ann}}
	s.Spec.Type = typ
	if port != 0 {
		s.Spec.Ports = append(s.Spec.Ports, struct {
			Name     string `json:"name,omitempty"`
			Port     int    `json:"port"`
			NodePort int    `json:"nodePort,omitempty"`
		}{Port: port, NodePort: nodePort})
	}
	for _, h := range lb {
		in := struct {
			IP       string `json:"ip,omitempty"`
			Hostname string `json:"hostname,omitempty"`
		}{IP: h}
		if strings.ContainsAny(h, "abcdefghijklmnopqrstuvwxyz") {
			in = struct {
				IP       string `json:"ip,omitempty"`
				Hostname string `json:"hostname,omitempty"`
			}{Hostname: h}
		}
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, in)
	}
	return s
}

func nodeOf(name string, ready bool, addrs ...string) *node {
	n := &node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	st := "False"
	if ready {
		st = "True"
	}
	n.Status.Conditions = []condition{{Type: "Ready", Status: st}}
	for i := 0; i+1 < len(addrs); i += 2 {
		n.Status.Addresses = append(n.Status.Addresses, struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		}{addrs[i], addrs[i+1]})
	}
	return n
}

func ingressOf(name, host, backend string, tls bool) *ingress {
	var i ingress
	i.Name = name
	type path = struct {
		Backend struct {
			Service *struct {
				Name string `json:"name"`
			} `json:"service,omitempty"`
		} `json:"backend"`
	}
	var p path
	p.Backend.Service = &struct {
		Name string `json:"name"`
	}{backend}
	i.Spec.Rules = append(i.Spec.Rules, struct {
		Host string `json:"host,omitempty"`
		HTTP *struct {
			Paths []struct {
				Backend struct {
					Service *struct {
						Name string `json:"name"`
					} `json:"service,omitempty"`
				} `json:"backend"`
			} `json:"paths"`
		} `json:"http,omitempty"`
	}{Host: host, HTTP: &struct {
		Paths []struct {
			Backend struct {
				Service *struct {
					Name string `json:"name"`
				} `json:"service,omitempty"`
			} `json:"backend"`
		} `json:"paths"`
	}{Paths: []struct {
		Backend struct {
			Service *struct {
				Name string `json:"name"`
			} `json:"service,omitempty"`
		} `json:"backend"`
	}{p}}})
	if tls {
		i.Spec.TLS = append(i.Spec.TLS, struct {
			Hosts []string `json:"hosts,omitempty"`
		}{[]string{host}})
	}
	return &i
}

func TestExposureOf(t *testing.T) {
	ready2 := []*node{nodeOf("n2", true, "InternalIP", "10.0.0.2"), nodeOf("n1", false, "ExternalIP", "192.0.2.1"), nodeOf("n3", true, "ExternalIP", "192.0.2.3", "InternalIP", "10.0.0.3")}
	for _, tc := range []struct {
		name  string
		svc   *service
		nodes []*node
		ing   *ingress
		state State
		want  string // URL, or text of the detail
	}{
		{"no service", nil, nil, nil, Waiting, "does not exist"},
		{"load balancer ip", svcOf("LoadBalancer", 5000, 31000, nil, "203.0.113.7"), nil, nil, Ready, "http://203.0.113.7:5000"},
		{"load balancer hostname", svcOf("LoadBalancer", 443, 0, nil, "lb.example.org"), nil, nil, Ready, "https://lb.example.org"},
		{"load balancer pending", svcOf("LoadBalancer", 5000, 31000, nil), nil, nil, Waiting, "LoadBalancer has no ingress yet"},
		{"floating ip annotation", svcOf("LoadBalancer", 5000, 0, map[string]string{AnnotationPublicHost: "198.51.100.9", AnnotationPublicScheme: "https", AnnotationPublicPort: "443"}), nil, nil, Ready, "https://198.51.100.9"},
		{"node port, external ip of a ready node", svcOf("NodePort", 5000, 30500, nil), ready2, nil, Ready, "http://192.0.2.3:30500"},
		{"node port, internal ip", svcOf("NodePort", 5000, 30500, nil), ready2[:2], nil, Ready, "http://10.0.0.2:30500"},
		{"node port, no ready node", svcOf("NodePort", 5000, 30500, nil), ready2[1:2], nil, Waiting, "no ready node has an address"},
		{"node port behind a VIP", svcOf("NodePort", 5000, 30500, map[string]string{AnnotationPublicHost: "keystone.example.org"}), nil, nil, Ready, "http://keystone.example.org:30500"},
		{"cluster ip with no ingress", svcOf("", 5000, 0, nil), nil, nil, Failed, "service openstack/keystone is of type ClusterIP and no Ingress keystone exposes it"},
		{"ingress", svcOf("ClusterIP", 5000, 0, nil), nil, ingressOf("keystone", "keystone.example.org", "keystone", false), Ready, "http://keystone.example.org"},
		{"ingress with tls", svcOf("ClusterIP", 5000, 0, nil), nil, ingressOf("keystone", "keystone.example.org", "keystone", true), Ready, "https://keystone.example.org"},
		{"ingress for another service", svcOf("ClusterIP", 5000, 0, nil), nil, ingressOf("keystone", "keystone.example.org", "glance", false), Failed, "Ingress keystone has no rule with a host for service keystone"},
		{"external name", svcOf("ExternalName", 5000, 0, nil), nil, nil, Failed, "is of type ExternalName"},
		{"no ports", svcOf("LoadBalancer", 0, 0, nil, "203.0.113.7"), nil, nil, Failed, "has no ports"},
		{"bad scheme", svcOf("LoadBalancer", 5000, 0, map[string]string{AnnotationPublicScheme: "ftp"}, "203.0.113.7"), nil, nil, Failed, `kolla.openstack.org/public-scheme: "ftp"`},
		{"bad port", svcOf("LoadBalancer", 5000, 0, map[string]string{AnnotationPublicPort: "http"}, "203.0.113.7"), nil, nil, Failed, `kolla.openstack.org/public-port: "http" is not a port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, o := exposureOf("service openstack/keystone", tc.svc, tc.nodes, fronts{route: "keystone", ingress: "keystone", ing: tc.ing, complete: true})
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

func routeOf(name, host, to string, tls, admitted bool) *route {
	r := &route{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec.Host, r.Spec.To.Kind, r.Spec.To.Name = host, "Service", to
	if tls {
		r.Spec.TLS = &struct {
			Termination string `json:"termination,omitempty"`
		}{"edge"}
	}
	st := "False"
	if admitted {
		st = "True"
	}
	r.Status.Ingress = append(r.Status.Ingress, struct {
		Host       string      `json:"host,omitempty"`
		Conditions []condition `json:"conditions,omitempty"`
	}{Host: host, Conditions: []condition{{Type: "Admitted", Status: st}}})
	return r
}

func TestRouteExposure(t *testing.T) {
	svc := svcOf("ClusterIP", 5000, 0, nil)
	for _, tc := range []struct {
		name  string
		f     fronts
		state State
		want  string
	}{
		{"admitted", fronts{rt: routeOf("keystone", "keystone.apps.example.org", "keystone", false, true), complete: true}, Ready, "http://keystone.apps.example.org"},
		{"admitted with tls", fronts{rt: routeOf("keystone", "keystone.apps.example.org", "keystone", true, true), complete: true}, Ready, "https://keystone.apps.example.org"},
		{"not admitted", fronts{rt: routeOf("keystone", "keystone.apps.example.org", "keystone", false, false), complete: true}, Waiting, "Route keystone is not admitted by a router yet"},
		{"another service", fronts{rt: routeOf("keystone", "keystone.apps.example.org", "glance", false, true), complete: true}, Failed, "Route keystone routes to Service glance, not to this Service"},
		{"route wins over ingress", fronts{rt: routeOf("keystone", "r.example.org", "keystone", false, true), ing: ingressOf("keystone", "i.example.org", "keystone", false), complete: true}, Ready, "http://r.example.org"},
		{"not listed yet", fronts{route: "keystone", ingress: "keystone"}, Waiting, "looking for a Route or Ingress"},
		{"neither", fronts{route: "keystone", ingress: "keystone", routesServed: true, complete: true}, Failed, "no Route keystone or Ingress keystone exposes it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, o := exposureOf("service openstack/keystone", svc, nil, tc.f)
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
