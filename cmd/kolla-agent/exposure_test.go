package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

func exposureEnv(t testing.TB, ns string) []string {
	t.Helper()
	return agentEnvWith(t, ns, []string{"examples/rbac/exposure.yaml"})
}

func mkExposedService(t testing.TB, ns, name string, typ corev1.ServiceType, ann map[string]string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "api", Port: 5000}},
		},
	}
	out, err := client().CoreV1().Services(ns).Create(ctxT(t), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mkIngress creates an Ingress routing host to the backend Service's port
// 5000, with TLS for the host if tls.
func mkIngress(t testing.TB, ns, name, host, backend string, tls bool) {
	t.Helper()
	pathType := networkingv1.PathTypePrefix
	in := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &pathType,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: backend, Port: networkingv1.ServiceBackendPort{Number: 5000}}},
			}}}},
		}}},
	}
	if tls {
		in.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{host}, SecretName: "tls"}}
	}
	if _, err := client().NetworkingV1().Ingresses(ns).Create(ctxT(t), in, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// exposed:NAME of a LoadBalancer Service waits, saying why, until a cloud
// controller writes the ingress IP (through the status subresource), then
// passes with the public URL.
func TestExposedLoadBalancer(t *testing.T) {
	ns := namespace(t)
	svc := mkExposedService(t, ns, "keystone", corev1.ServiceTypeLoadBalancer, nil)
	a := startAgent(t, exposureEnv(t, ns), "wait", "--timeout", "1m", "exposed:keystone")
	a.waitLog("LoadBalancer has no ingress yet")
	a.running()
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	if _, err := client().CoreV1().Services(ns).UpdateStatus(ctxT(t), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
	if !strings.Contains(a.out.String(), "exposed at http://203.0.113.10:5000 (LoadBalancer ingress)") {
		t.Errorf("the public URL is not reported:\n%s", a.out.String())
	}
}

// A NodePort Service: the port the real API server allocated, on a ready
// node's ExternalIP (the ClusterRole for nodes is needed); with a VIP in the
// annotation, the VIP and no node lookup.
func TestExposedNodePort(t *testing.T) {
	ns := namespace(t)
	k := s.env.Kubelet()
	if err := k.EnsureNode(ctxT(t), testenv.DefaultNode); err != nil {
		t.Fatal(err)
	}
	svc := mkExposedService(t, ns, "keystone", corev1.ServiceTypeNodePort, nil)
	port := svc.Spec.Ports[0].NodePort
	if port == 0 {
		t.Fatal("the API server allocated no nodePort")
	}
	env := exposureEnv(t, ns)
	a := startAgent(t, env, "wait", "--timeout", "1m", "exposed:keystone")
	a.wantExit(0)
	nodes, err := client().CoreV1().Nodes().List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes.Items {
		for _, addr := range n.Status.Addresses {
			if strings.Contains(a.out.String(), fmt.Sprintf("exposed at http://%s:%d (NodePort on node %s)", addr.Address, port, n.Name)) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no node address with nodePort %d reported:\n%s", port, a.out.String())
	}

	vip := mkExposedService(t, ns, "glance", corev1.ServiceTypeNodePort, map[string]string{discovery.AnnotationPublicHost: "glance.vip.example.org"})
	b := startAgent(t, env, "wait", "--timeout", "1m", "exposed:glance")
	b.wantExit(0)
	if want := fmt.Sprintf("exposed at http://glance.vip.example.org:%d", vip.Spec.Ports[0].NodePort); !strings.Contains(b.out.String(), want) {
		t.Errorf("want %q:\n%s", want, b.out.String())
	}

	// The VIP in the agent's config instead, over the annotation's.
	cfg := agentYAML(t, "dependencies:\n  wait: [\"exposed:glance\", \"exposed:nova\"]\nexposure:\n  glance: {host: 192.0.2.50}\n  nova."+ns+": {host: nova.vip.example.org, port: 443, scheme: https}\n")
	mkExposedService(t, ns, "nova", corev1.ServiceTypeNodePort, nil)
	c := startAgent(t, env, "--config", cfg, "init")
	c.wantExit(0)
	for _, want := range []string{fmt.Sprintf("exposed at http://192.0.2.50:%d (agent config)", vip.Spec.Ports[0].NodePort), "exposed at https://nova.vip.example.org (agent config)"} {
		if !strings.Contains(c.out.String(), want) {
			t.Errorf("want %q:\n%s", want, c.out.String())
		}
	}
}

// A ClusterIP Service: exposed by an Ingress (https when its TLS lists the
// host) or an OpenShift Route (a CRD the testenv installs), the Route only
// once a router admitted it; with neither, or with one for another Service,
// a clear error and exit 2.
func TestExposedIngressAndRoute(t *testing.T) {
	ns := namespace(t)
	env := exposureEnv(t, ns)
	mkExposedService(t, ns, "keystone", corev1.ServiceTypeClusterIP, nil)
	bad := startAgent(t, env, "wait", "--timeout", "1m", "exposed:keystone")
	bad.wantExit(2)
	if out := bad.out.String(); !strings.Contains(out, "service "+ns+"/keystone is of type ClusterIP and no") || !strings.Contains(out, "Ingress keystone exposes it") {
		t.Errorf("a ClusterIP Service without exposure:\n%s", out)
	}

	mkIngress(t, ns, "keystone", "keystone.example.org", "keystone", true)
	ok := startAgent(t, env, "wait", "--timeout", "1m", "exposed:keystone")
	ok.wantExit(0)
	if !strings.Contains(ok.out.String(), "exposed at https://keystone.example.org (Ingress keystone)") {
		t.Errorf("ingress exposure:\n%s", ok.out.String())
	}
	mkExposedService(t, ns, "nova", corev1.ServiceTypeClusterIP, nil)
	mkIngress(t, ns, "nova", "nova.example.org", "placement", false)
	wrong := startAgent(t, env, "wait", "--timeout", "1m", "exposed:nova")
	wrong.wantExit(2)
	if !strings.Contains(wrong.out.String(), "Ingress nova has no rule with a host for service nova") {
		t.Errorf("an Ingress for another service:\n%s", wrong.out.String())
	}

	if err := s.env.InstallRouteCRD(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(s.env.Admin())
	routes := dyn.Resource(testenv.RoutesGVR).Namespace(ns)
	mkRoute := func(name, host, to string) *unstructured.Unstructured {
		t.Helper()
		r, err := routes.Create(ctxT(t), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "route.openshift.io/v1", "kind": "Route",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"host": host, "to": map[string]any{"kind": "Service", "name": to}},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mkExposedService(t, ns, "glance", corev1.ServiceTypeClusterIP, nil)
	r := mkRoute("glance", "glance.apps.example.org", "glance")
	ra := startAgent(t, env, "wait", "--timeout", "1m", "exposed:glance")
	ra.waitLog("Route glance is not admitted by a router yet")
	ra.running()
	r.Object["status"] = map[string]any{"ingress": []any{map[string]any{
		"host": "glance.apps.example.org", "routerName": "default",
		"conditions": []any{map[string]any{"type": "Admitted", "status": "True"}},
	}}}
	if _, err := routes.UpdateStatus(ctxT(t), r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ra.wantExit(0)
	if !strings.Contains(ra.out.String(), "exposed at http://glance.apps.example.org (Route glance)") {
		t.Errorf("route exposure:\n%s", ra.out.String())
	}
	mkExposedService(t, ns, "cinder", corev1.ServiceTypeClusterIP, nil)
	mkRoute("cinder", "cinder.apps.example.org", "heat")
	rw := startAgent(t, env, "wait", "--timeout", "1m", "exposed:cinder")
	rw.wantExit(2)
	if !strings.Contains(rw.out.String(), "Route cinder routes to Service heat, not to this Service") {
		t.Errorf("a Route for another service:\n%s", rw.out.String())
	}
}

// publicURL and internalURL in a template, against the real API: the
// LoadBalancer's ingress IP (waited for: the render starts before a cloud
// controller writes it) and the Service's cluster DNS name and port. A
// ClusterIP Service asked for a public URL is exit 1 naming it and its type.
func TestRenderPublicAndInternalURL(t *testing.T) {
	ns := namespace(t)
	env := exposureEnv(t, ns)
	svc := mkExposedService(t, ns, "keystone", corev1.ServiceTypeLoadBalancer, nil)
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "endpoints.tmpl")
	os.WriteFile(tmpl, []byte(`public = {{ publicURL "keystone" "/v3" }}
internal = {{ internalURL "keystone.`+ns+`" "/v3" }}
`), 0o644)
	dest := filepath.Join(dir, "endpoints.conf")
	cfg := agentYAML(t, "render:\n  - {src: "+tmpl+", dest: "+dest+"}\nrenderOptions: {timeout: 30s}\n")
	a := startAgent(t, env, "--config", cfg, "render")
	a.waitLog("LoadBalancer has no ingress yet")
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.20"}}
	if _, err := client().CoreV1().Services(ns).UpdateStatus(ctxT(t), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
	got, _ := os.ReadFile(dest)
	want := fmt.Sprintf("public = http://203.0.113.20:5000/v3\ninternal = http://keystone.%s.svc.%s:5000/v3\n", ns, s.env.ClusterDomain)
	if string(got) != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}

	mkExposedService(t, ns, "glance", corev1.ServiceTypeClusterIP, nil)
	os.WriteFile(tmpl, []byte(`public = {{ publicURL "glance" }}`+"\n"), 0o644)
	b := startAgent(t, env, "--config", cfg, "render")
	b.wantExit(1)
	if out := b.out.String(); !strings.Contains(out, tmpl+":1:") || !strings.Contains(out, "service "+ns+"/glance is of type ClusterIP") {
		t.Errorf("a ClusterIP Service's public URL:\n%s", out)
	}
}

// The API server SIGKILLed while an exposed: wait watches a LoadBalancer
// Service: the wait reports the outage, resumes when the API server is back,
// and passes once the ingress IP is written. Nothing panics.
func TestExposedSurvivesAPIServerKill(t *testing.T) {
	ns := namespace(t)
	svc := mkExposedService(t, ns, "keystone", corev1.ServiceTypeLoadBalancer, nil)
	a := startAgent(t, exposureEnv(t, ns), "wait", "--timeout", "2m", "exposed:keystone")
	a.waitLog("LoadBalancer has no ingress yet")
	if err := s.env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			s.env.StartAPIServer()
		}
	})
	a.waitLog("unhealthy")
	a.running()
	restarted = true
	if err := s.env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.40"}}
	eventually(t, "the status written after the restart", func() bool {
		_, err := client().CoreV1().Services(ns).UpdateStatus(ctxT(t), svc, metav1.UpdateOptions{})
		return err == nil
	})
	a.wantExit(0)
	if !strings.Contains(a.out.String(), "exposed at http://203.0.113.40:5000") {
		t.Errorf("after the API server came back:\n%s", a.out.String())
	}
}
