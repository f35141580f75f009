package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// Every Kubernetes manifest of examples/exposure and examples/rbac is
// accepted by the real API server: server-side apply, dry run, in a fresh
// namespace (the Route's CRD installed first, as on OpenShift).
func TestExampleManifestsValidate(t *testing.T) {
	var paths []string
	for _, dir := range []string{"exposure", "rbac"} {
		p, err := filepath.Glob("../../examples/" + dir + "/*.yaml")
		if err != nil || len(p) == 0 {
			t.Fatalf("no manifests in examples/%s: %v", dir, err)
		}
		paths = append(paths, p...)
	}
	ns := namespace(t)
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p), func(t *testing.T) {
			applyExample(t, p, ns, true)
		})
	}
}

// Each exposure example, applied for real, gives the public URL its
// comments promise: what the agent's exposed: wait reports.
func TestExampleExposures(t *testing.T) {
	k := s.env.Kubelet()
	if err := k.EnsureNode(ctxT(t), testenv.DefaultNode); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{"keystone-loadbalancer.yaml", "https://198.51.100.10 (annotation kolla.openstack.org/public-host)"},
		{"keystone-nodeport.yaml", "http://keystone.example.org:%d (annotation kolla.openstack.org/public-host)"},
		{"keystone-ingress.yaml", "https://keystone.example.org (Ingress keystone)"},
		{"keystone-route.yaml", "https://keystone.apps.example.org (Route keystone)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ns := namespace(t)
			objs := applyExample(t, "../../examples/exposure/"+tc.file, ns, false)
			for _, o := range objs {
				if o.GetKind() == "Route" { // a router admits it
					admitted := []any{map[string]any{"host": "keystone.apps.example.org", "conditions": []any{map[string]any{"type": "Admitted", "status": "True"}}}}
					if err := unstructured.SetNestedSlice(o.Object, admitted, "status", "ingress"); err != nil {
						t.Fatal(err)
					}
					if _, err := dynamic.NewForConfigOrDie(s.env.Admin()).Resource(testenv.RoutesGVR).Namespace(ns).UpdateStatus(ctxT(t), o, metav1.UpdateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := tc.want
			if strings.Contains(want, "%d") {
				svc, err := client().CoreV1().Services(ns).Get(ctxT(t), "keystone", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				want = fmt.Sprintf(want, svc.Spec.Ports[0].NodePort)
			}
			a := startAgent(t, exposureEnv(t, ns), "wait", "--timeout", "1m", "exposed:keystone")
			a.wantExit(0)
			if !strings.Contains(a.out.String(), "is exposed at "+want) {
				t.Errorf("want %q:\n%s", want, a.out.String())
			}
		})
	}
}

// applyExample applies every object of the manifest at p (server-side,
// namespaced objects into ns) and returns them as the API server has them;
// with dryRun nothing is stored.
func applyExample(t *testing.T, p, ns string, dryRun bool) []*unstructured.Unstructured {
	t.Helper()
	if err := s.env.InstallRouteCRD(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(s.env.Admin())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn := dynamic.NewForConfigOrDie(s.env.Admin())
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ApplyOptions{FieldManager: "examples-test"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if obj.Object == nil {
			continue // a document of comments only
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", p, gvk, obj.GetName(), err)
		}
		ri := dyn.Resource(m.Resource).(dynamic.ResourceInterface)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			obj.SetNamespace(ns)
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		got, err := ri.Apply(ctxT(t), obj.GetName(), &obj, opts)
		if err != nil {
			t.Fatalf("%s: %s %s: the API server refuses it: %v", p, gvk.Kind, obj.GetName(), err)
		}
		out = append(out, got)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", p)
	}
	return out
}

// Every pod manifest in examples/ is accepted by the real API server
// (server-side dry run): the native-sidecar layout (an init container with
// restartPolicy: Always and a startupProbe) included.
func TestExamplePodsValidate(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*/pod.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example pods: %v", err)
	}
	ns := namespace(t)
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var pod corev1.Pod
			if err := yaml.UnmarshalStrict(b, &pod); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if _, err := client().CoreV1().Pods(ns).Create(ctxT(t), &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatalf("%s: the API server refuses it: %v", p, err)
			}
			for _, c := range pod.Spec.InitContainers {
				if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && c.StartupProbe == nil {
					t.Errorf("%s: native sidecar %s has no startupProbe: the service would start before the agent serves", p, c.Name)
				}
			}
		})
	}
}

// Every example bootstrap Job template, rendered and completed by the agent
// in create mode, is accepted by the real API server: the Job exists, with
// the agent's defaults merged in and the step's command rendered.
func TestExampleBootstrapJobsCreate(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*/db-sync-job.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example bootstrap jobs: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			ns := namespace(t)
			cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: create\n  name: example-db-sync\n  job: %s\n  command: keystone-manage db_sync\n  permanentExitCodes: [2]\n", ns, abs))
			a := startAgent(t, withEnv(bootstrapEnv(t, ns, "create"), "POD_NAME=example-0"), "--config", cfg, "init")
			name := waitJobs(t, ns, "example-db-sync", 1)[0]
			j, err := client().BatchV1().Jobs(ns).Get(ctxT(t), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c := j.Spec.Template.Spec.Containers[0].Command; c[len(c)-1] != "keystone-manage db_sync" {
				t.Errorf("%s: rendered command %q", p, c)
			}
			if j.Spec.PodFailurePolicy == nil || len(j.Spec.PodFailurePolicy.Rules) != 2 {
				t.Errorf("%s: podFailurePolicy %+v", p, j.Spec.PodFailurePolicy)
			}
			a.cmd.Process.Kill()
		})
	}
}
