package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	agentconfig "github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/rbac"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// examplesDir is examples/ from this package's directory.
const examplesDir = "../../examples"

// Every Kubernetes manifest under examples/ (each file on its own: the
// slice's, the alternatives, openstack-helm's rendered pod) is accepted by
// the real API server: server-side apply, dry run, in a fresh namespace
// (the Route's CRD installed first, as on OpenShift). Configs, templates
// and chart values are not manifests (see exampleManifest).
func TestExampleManifestsValidate(t *testing.T) {
	byDir := map[string][]string{}
	for _, rel := range exampleFiles(t) {
		if _, ok := exampleManifest(t, rel); ok {
			byDir[path.Dir(rel)] = append(byDir[path.Dir(rel)], rel)
		}
	}
	for _, dir := range []string{".", "exposure", "rbac", "openstack-helm", "mariadb", "rabbitmq", "memcached", "keystone", "glance", "nova-conductor"} {
		if len(byDir[dir]) == 0 {
			t.Errorf("no manifests in examples/%s", dir)
		}
	}
	ns := namespace(t)
	for _, dir := range slices.Sorted(maps.Keys(byDir)) {
		for _, rel := range byDir[dir] {
			t.Run(rel, func(t *testing.T) {
				applyExample(t, filepath.Join(examplesDir, rel), ns, true)
			})
		}
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

// exampleClients: what applies any example object to the test API server,
// the Route's CRD installed first (as on OpenShift).
func exampleClients(t *testing.T) (meta.RESTMapper, *dynamic.DynamicClient) {
	t.Helper()
	if err := s.env.InstallRouteCRD(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(s.env.Admin())
	if err != nil {
		t.Fatal(err)
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dynamic.NewForConfigOrDie(s.env.Admin())
}

// applyExample applies every object of the manifest at p (server-side,
// namespaced objects into ns) and returns them as the API server has them;
// with dryRun nothing is stored.
func applyExample(t *testing.T, p, ns string, dryRun bool) []*unstructured.Unstructured {
	t.Helper()
	mapper, dyn := exampleClients(t)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
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
		got, err := applyObject(t, ri, &obj, dryRun)
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

// applyObject applies obj server-side (a dry run if asked) with strict
// field validation: a misspelt field is a refusal, not a field dropped.
func applyObject(t *testing.T, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	t.Helper()
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: "examples-test", FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return ri.Patch(ctxT(t), obj.GetName(), types.ApplyPatchType, data, opts)
}

// Every pod manifest in examples/ is accepted by the real API server
// (server-side dry run): the native-sidecar layout (an init container with
// restartPolicy: Always and a startupProbe) included. A pod.yaml beside a
// deployment.yaml is that Deployment's pod alone: the two stay the same.
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
			dp := filepath.Join(filepath.Dir(p), "deployment.yaml")
			b, err = os.ReadFile(dp)
			if errors.Is(err, fs.ErrNotExist) {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			var dep appsv1.Deployment
			if err := yaml.UnmarshalStrict(b, &dep); err != nil {
				t.Fatalf("%s: %v", dp, err)
			}
			if d := firstDifference(dep.Spec.Template.Spec, pod.Spec); d != "" {
				t.Errorf("%s's pod template and %s differ:\n%s", dp, p, d)
			}
			if !maps.Equal(dep.Spec.Template.Labels, pod.Labels) {
				t.Errorf("%s's pod labels %v, %s's %v", dp, dep.Spec.Template.Labels, p, pod.Labels)
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

// exampleFiles lists every regular file under examples/ (paths relative to
// it, with slashes), but the no-cluster demos of demo/ and local/.
func exampleFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(examplesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(examplesDir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && (rel == "demo" || rel == "local"):
			return filepath.SkipDir
		case d.Type().IsRegular():
			out = append(out, rel)
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("examples/: %d files: %v", len(out), err)
	}
	return out
}

// exampleManifest reads examples/rel as Kubernetes objects. ok is false for
// what is not a manifest: not YAML, a template ({{ }}: a bootstrap Job's,
// a Helm chart's), or YAML without apiVersion and kind (agent.yaml, chart
// values), and for the kustomization itself.
func exampleManifest(t *testing.T, rel string) (objs []*unstructured.Unstructured, ok bool) {
	t.Helper()
	if ext := path.Ext(rel); ext != ".yaml" && ext != ".yml" {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(examplesDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("{{")) {
		return nil, false
	}
	objs, err = decodeObjects(b)
	if err != nil {
		return nil, false
	}
	for _, o := range objs {
		if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetKind() == "Kustomization" {
			return nil, false
		}
	}
	return objs, len(objs) > 0
}

// decodeObjects splits a multi-document YAML stream into objects, skipping
// documents of comments only.
func decodeObjects(b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, err
		}
		if obj.Object != nil {
			out = append(out, &obj)
		}
	}
}

// The files of examples/ that kustomization.yaml does not list, and why.
// Everything else must be listed (as a resource or in a configMapGenerator):
// a new file cannot be forgotten. A directory entry ends in "/".
// sharedRole: the per-mode Roles, for clusters that bind by mode.
const sharedRole = "one mode's Role, shared by every service (no resourceNames): the slice binds each service to its own Role instead (rbac/service-roles.yaml); the tests apply these files mode by mode"

var notInKustomization = map[string]string{
	"README.md":                           "what is where",
	"exposure/keystone-loadbalancer.yaml": "an alternative to exposure/keystone-nodeport.yaml (the same Service keystone); TestExampleExposures applies it",
	"exposure/keystone-route.yaml":        "an alternative to exposure/keystone-nodeport.yaml (the same Service keystone, and a Route)",
	"exposure/keystone-ingress.yaml":      "an alternative to exposure/keystone-nodeport.yaml (the same Service keystone, and an Ingress)",
	"nova-conductor/pod.yaml":             "deployment.yaml's pod alone (TestExamplePodsValidate keeps them the same)",
	"rbac/kolla-agent.yaml":               sharedRole,
	"rbac/bootstrap-create.yaml":          sharedRole,
	"rbac/bootstrap-lease.yaml":           sharedRole,
	"rbac/bootstrap-rollout.yaml":         sharedRole,
	"rbac/bootstrap-wait.yaml":            sharedRole,
	"rbac/bootstrap-condition.yaml":       sharedRole,
	"rbac/exposure.yaml":                  sharedRole,
	"rbac/reload-lease.yaml":              sharedRole,
	"rbac/reload-rollout.yaml":            sharedRole,
	"rbac/reload-api.yaml":                sharedRole,
	"rbac/job-policy.yaml":                "cluster-wide (a ValidatingAdmissionPolicy and its binding), applied by an administrator to labelled namespaces; TestJobPolicyRefusesForgedJobs applies it",
	"openstack-helm/":                     "an openstack-helm chart's keystone-api, an alternative to keystone/",
}

// kustomizeExamples builds examples/ with kustomize (as `kubectl apply -k`
// does) and says, for each object, which file of the kustomization made it.
func kustomizeExamples(t *testing.T) (objs []*unstructured.Unstructured, origin func(*unstructured.Unstructured) string, listed map[string]bool) {
	t.Helper()
	root, err := filepath.Abs(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), root)
	if err != nil {
		t.Fatalf("kustomize build examples/: %v", err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	if objs, err = decodeObjects(out); err != nil {
		t.Fatalf("kustomize build examples/: %v", err)
	}

	b, err := os.ReadFile(filepath.Join(examplesDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kusttypes.Kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("examples/kustomization.yaml: %v", err)
	}
	listed = map[string]bool{"kustomization.yaml": true}
	from := map[string]string{} // kind/name -> file
	for _, r := range k.Resources {
		r = path.Clean(r)
		listed[r] = true
		b, err := os.ReadFile(filepath.Join(examplesDir, r))
		if err != nil {
			t.Fatalf("examples/kustomization.yaml: resources: %v", err)
		}
		docs, err := decodeObjects(b)
		if err != nil {
			t.Fatalf("examples/%s: %v", r, err)
		}
		for _, o := range docs {
			from[o.GetKind()+"/"+o.GetName()] = "examples/" + r
		}
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.FileSources {
			if _, p, ok := strings.Cut(f, "="); ok {
				f = p
			}
			listed[path.Clean(f)] = true
		}
		from["ConfigMap/"+g.Name] = "examples/kustomization.yaml configMapGenerator " + g.Name
	}
	origin = func(o *unstructured.Unstructured) string {
		if f, ok := from[o.GetKind()+"/"+o.GetName()]; ok {
			return f
		}
		return "examples/kustomization.yaml"
	}
	return objs, origin, listed
}

// examples/kustomization.yaml, built by the real kustomize, makes the whole
// slice, and the real API server accepts every object (server-side apply,
// dry run, strict field validation; namespaced objects in a fresh namespace
// instead of openstack). The kustomization lists every file of examples/ or
// the file is an exception that says why (notInKustomization). The slice
// holds together: every ConfigMap, Secret, key and ServiceAccount a pod
// names exists, every Service selects a pod, every native sidecar has a
// startupProbe, no Role reads Secrets, and each service's ServiceAccount
// is bound to exactly the Roles its agent.yaml needs.
func TestExampleKustomization(t *testing.T) {
	objs, origin, listed := kustomizeExamples(t)

	t.Run("every file listed", func(t *testing.T) {
		for _, rel := range exampleFiles(t) {
			why, excepted := exceptionFor(rel)
			switch {
			case listed[rel] && excepted:
				t.Errorf("examples/%s is listed in kustomization.yaml and an exception (%s): drop the exception", rel, why)
			case !listed[rel] && !excepted:
				t.Errorf("examples/%s: not in examples/kustomization.yaml (resources or a configMapGenerator); list it, or say why not in notInKustomization", rel)
			}
		}
		for e := range notInKustomization {
			if _, err := os.Stat(filepath.Join(examplesDir, e)); err != nil {
				t.Errorf("notInKustomization: %s: %v", e, err)
			}
		}
	})

	t.Run("namespace", func(t *testing.T) {
		var haveNS bool
		for _, o := range objs {
			switch {
			case o.GetKind() == "Namespace":
				haveNS = haveNS || o.GetName() == "openstack"
			case o.GetNamespace() != "openstack" && !clusterScoped(o):
				t.Errorf("%s: %s %s: namespace %q, want openstack", origin(o), o.GetKind(), o.GetName(), o.GetNamespace())
			}
		}
		if !haveNS {
			t.Errorf("no Namespace openstack in the build")
		}
	})

	t.Run("apply", func(t *testing.T) {
		mapper, dyn := exampleClients(t)
		ns := namespace(t)
		for _, o := range objs {
			o := o.DeepCopy()
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Errorf("%s: %s %s: %v", origin(o), gvk, o.GetName(), err)
				continue
			}
			ri := dyn.Resource(m.Resource).(dynamic.ResourceInterface)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				o.SetNamespace(ns)
				ri = dyn.Resource(m.Resource).Namespace(ns)
			}
			if _, err := applyObject(t, ri, o, true); err != nil {
				t.Errorf("%s: %s %s: the API server refuses it: %v", origin(o), gvk.Kind, o.GetName(), err)
			}
		}
	})

	t.Run("references", func(t *testing.T) {
		checkSliceReferences(t, objs, origin)
	})

	t.Run("rbac", func(t *testing.T) {
		checkSliceRBAC(t, objs, origin)
	})
}

// exceptionFor says why examples/rel is not in the kustomization, if it is
// an exception.
func exceptionFor(rel string) (string, bool) {
	if why, ok := notInKustomization[rel]; ok {
		return why, true
	}
	for e, why := range notInKustomization {
		if strings.HasSuffix(e, "/") && strings.HasPrefix(rel, e) {
			return why, true
		}
	}
	return "", false
}

// clusterScoped: the kinds of the slice that have no namespace.
func clusterScoped(o *unstructured.Unstructured) bool {
	switch o.GetKind() {
	case "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition":
		return true
	}
	return false
}

// podTemplate is the pod of a workload (or a Pod), decoded strictly; a pod
// that does not decode is reported, and skipped.
func podTemplate(t *testing.T, o *unstructured.Unstructured) (*corev1.PodTemplateSpec, bool) {
	t.Helper()
	var m map[string]any
	switch o.GetKind() {
	case "Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet":
		m, _, _ = unstructured.NestedMap(o.Object, "spec", "template")
	case "CronJob":
		m, _, _ = unstructured.NestedMap(o.Object, "spec", "jobTemplate", "spec", "template")
	case "Pod":
		m = map[string]any{"metadata": o.Object["metadata"], "spec": o.Object["spec"]}
	default:
		return nil, false
	}
	var pt corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m, &pt, true); err != nil {
		t.Errorf("%s %s: its pod: %v", o.GetKind(), o.GetName(), err)
		return nil, false
	}
	return &pt, true
}

// dataKeys are the keys of a ConfigMap or a Secret as built.
func dataKeys(o *unstructured.Unstructured) map[string]bool {
	keys := map[string]bool{}
	for _, f := range []string{"data", "binaryData", "stringData"} {
		m, _, _ := unstructured.NestedMap(o.Object, f)
		for k := range m {
			keys[k] = true
		}
	}
	return keys
}

// checkSliceReferences: what the pods name exists in the build, the pods
// of the bootstrap Jobs the agents create from their templates included.
func checkSliceReferences(t *testing.T, objs []*unstructured.Unstructured, origin func(*unstructured.Unstructured) string) {
	byKind := map[string]map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if byKind[o.GetKind()] == nil {
			byKind[o.GetKind()] = map[string]*unstructured.Unstructured{}
		}
		byKind[o.GetKind()][o.GetName()] = o
	}
	var pods []*corev1.PodTemplateSpec
	for _, o := range objs {
		pt, ok := podTemplate(t, o)
		if !ok {
			continue
		}
		pods = append(pods, pt)
		// a StatefulSet's volumeClaimTemplates are volumes of its pods
		var claims []string
		vcts, _, _ := unstructured.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
		for _, v := range vcts {
			if m, ok := v.(map[string]any); ok {
				name, _, _ := unstructured.NestedString(m, "metadata", "name")
				claims = append(claims, name)
			}
		}
		checkPodReferences(t, fmt.Sprintf("%s: %s %s", origin(o), o.GetKind(), o.GetName()), pt, claims, byKind)
	}
	for _, svc := range byKind["Service"] {
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		if len(sel) == 0 {
			continue
		}
		if !slices.ContainsFunc(pods, func(pt *corev1.PodTemplateSpec) bool {
			return labels.SelectorFromSet(sel).Matches(labels.Set(pt.Labels))
		}) {
			t.Errorf("%s: Service %s selects %v: no pod of the slice has these labels", origin(svc), svc.GetName(), sel)
		}
	}
	// The bootstrap Jobs: each template rendered for each step, the
	// template functions standing in for what the cluster would say.
	for _, cm := range byKind["ConfigMap"] {
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if data["agent.yaml"] == "" {
			continue
		}
		cfg, err := agentconfig.Parse("ConfigMap "+cm.GetName()+" agent.yaml", []byte(data["agent.yaml"]))
		if err != nil {
			t.Errorf("%s: %v", origin(cm), err)
			continue
		}
		b := cfg.Bootstrap
		if b.Job == "" {
			continue
		}
		key := path.Base(b.Job)
		src, ok := data[key]
		if !ok {
			t.Errorf("%s: bootstrap.job %s: ConfigMap %s has no key %s", origin(cm), b.Job, cm.GetName(), key)
			continue
		}
		steps := []agentconfig.Phase{{Command: b.Command}}
		for _, ph := range b.Phases {
			if ph.Command == "" {
				ph.Command = b.Command
			}
			steps = append(steps, ph)
		}
		for _, st := range steps {
			where := fmt.Sprintf("%s: %s, phase %q", origin(cm), key, st.Name)
			job, err := renderJobTemplate(src, b.Name, st)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			checkPodReferences(t, where, &job.Spec.Template, nil, byKind)
		}
	}
}

// renderJobTemplate renders a bootstrap Job template for one step as the
// agent does (.Bootstrap.Name, .Phase, .Command, .Version), every template
// function answering a placeholder, and decodes the Job strictly.
func renderJobTemplate(src, name string, step agentconfig.Phase) (*batchv1.Job, error) {
	funcs := template.FuncMap{}
	for _, f := range []string{"env", "podIP", "podName", "namespace", "nodeName", "hostname", "file", "secret", "service", "endpoints", "publicURL", "internalURL", "srv", "lookup", "join", "split", "quote", "default", "toJSON", "indent", "replace", "lower", "upper", "withPort"} {
		funcs[f] = func(...any) string { return "placeholder" }
	}
	tmpl, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	data := map[string]any{"Bootstrap": map[string]any{"Name": name, "Phase": step.Name, "Command": step.Command, "Version": "0123456789"}}
	if err := tmpl.Execute(&out, data); err != nil {
		return nil, err
	}
	var job batchv1.Job
	if err := yaml.UnmarshalStrict(out.Bytes(), &job); err != nil {
		return nil, fmt.Errorf("the rendered Job: %v", err)
	}
	return &job, nil
}

// checkPodReferences: the ServiceAccount, ConfigMaps, Secrets and their
// keys that a pod names exist in the build, each mount has its volume (one
// of the pod's or of claims); a native sidecar has a startupProbe.
func checkPodReferences(t *testing.T, where string, pt *corev1.PodTemplateSpec, claims []string, byKind map[string]map[string]*unstructured.Unstructured) {
	t.Helper()
	need := func(kind, name, key, what string) {
		t.Helper()
		obj, ok := byKind[kind][name]
		switch {
		case !ok:
			t.Errorf("%s: %s names %s %s, which the slice does not make", where, what, kind, name)
		case key != "" && !dataKeys(obj)[key]:
			t.Errorf("%s: %s names key %s of %s %s, which has no such key", where, what, key, kind, name)
		}
	}
	spec := &pt.Spec
	if sa := spec.ServiceAccountName; sa != "" {
		need("ServiceAccount", sa, "", "serviceAccountName")
	}
	for _, v := range spec.Volumes {
		what := "volume " + v.Name
		switch {
		case v.ConfigMap != nil:
			need("ConfigMap", v.ConfigMap.Name, "", what)
			for _, it := range v.ConfigMap.Items {
				need("ConfigMap", v.ConfigMap.Name, it.Key, what)
			}
		case v.Secret != nil:
			need("Secret", v.Secret.SecretName, "", what)
			for _, it := range v.Secret.Items {
				need("Secret", v.Secret.SecretName, it.Key, what)
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				// kube-root-ca.crt: every namespace's, published by the
				// controller manager (the API token's CA).
				if src.ConfigMap != nil && src.ConfigMap.Name != "kube-root-ca.crt" {
					need("ConfigMap", src.ConfigMap.Name, "", what)
					for _, it := range src.ConfigMap.Items {
						need("ConfigMap", src.ConfigMap.Name, it.Key, what)
					}
				}
				if src.Secret != nil {
					need("Secret", src.Secret.Name, "", what)
					for _, it := range src.Secret.Items {
						need("Secret", src.Secret.Name, it.Key, what)
					}
				}
			}
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		what := "container " + c.Name
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				need("Secret", r.Name, r.Key, what)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				need("ConfigMap", r.Name, r.Key, what)
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				need("Secret", e.SecretRef.Name, "", what)
			}
			if e.ConfigMapRef != nil {
				need("ConfigMap", e.ConfigMapRef.Name, "", what)
			}
		}
		for _, m := range c.VolumeMounts {
			if !slices.Contains(claims, m.Name) && !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
				t.Errorf("%s: container %s mounts volume %s, which the pod does not have", where, c.Name, m.Name)
			}
			// a subPath of a ConfigMap or Secret volume is one of its keys
			if m.SubPath == "" {
				continue
			}
			for _, v := range spec.Volumes {
				if v.Name != m.Name {
					continue
				}
				if v.ConfigMap != nil && len(v.ConfigMap.Items) == 0 {
					need("ConfigMap", v.ConfigMap.Name, m.SubPath, what+" subPath")
				}
				if v.Secret != nil && len(v.Secret.Items) == 0 {
					need("Secret", v.Secret.SecretName, m.SubPath, what+" subPath")
				}
			}
		}
	}
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && c.StartupProbe == nil {
			t.Errorf("%s: native sidecar %s has no startupProbe: the service would start before it serves", where, c.Name)
		}
	}
}

// templateNeedsExposure: a template action that calls publicURL or
// internalURL, which read the Service through the API.
var templateNeedsExposure = regexp.MustCompile(`\{\{[^}]*\b(publicURL|internalURL)\b`)

// checkSliceRBAC: least privilege. Each pod with an agent.yaml (the
// ConfigMap mounted at /etc/kolla-agent) runs as a ServiceAccount bound to
// one Role, whose rules are what `kolla-agent config rbac` prints for that
// agent.yaml and workload (resourceNames included); no Role reads Secrets
// or grants everything; nothing is cluster-wide.
func checkSliceRBAC(t *testing.T, objs []*unstructured.Unstructured, origin func(*unstructured.Unstructured) string) {
	configMaps := map[string]*corev1.ConfigMap{}
	bound := map[string][]string{} // ServiceAccount -> Roles
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm); err != nil {
				t.Fatal(err)
			}
			configMaps[cm.Name] = &cm
		case "RoleBinding":
			var rb rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &rb, true); err != nil {
				t.Fatalf("%s: RoleBinding %s: %v", origin(o), o.GetName(), err)
			}
			for _, sub := range rb.Subjects {
				if sub.Kind == "ServiceAccount" && (sub.Namespace == "" || sub.Namespace == "openstack") {
					bound[sub.Name] = append(bound[sub.Name], rb.RoleRef.Name)
				}
			}
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &r, true); err != nil {
				t.Fatalf("%s: Role %s: %v", origin(o), o.GetName(), err)
			}
			roles[r.Name] = r.Rules
			for _, rule := range r.Rules {
				if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.Verbs, "*") {
					t.Errorf("%s: Role %s grants %v on %v: the agent reads no Secret through the API and needs no wildcard", origin(o), r.Name, rule.Verbs, rule.Resources)
				}
			}
		case "ClusterRole", "ClusterRoleBinding":
			t.Errorf("%s: %s %s: the slice needs nothing cluster-wide", origin(o), o.GetKind(), o.GetName())
		}
	}
	ruleSet := func(rules []rbacv1.PolicyRule) []string {
		var out []string
		for _, r := range rules {
			out = append(out, strings.Join(r.APIGroups, ",")+"/"+strings.Join(r.Resources, ",")+" "+strings.Join(r.Verbs, ",")+" "+strings.Join(r.ResourceNames, ","))
		}
		slices.Sort(out)
		return out
	}
	checked := 0
	for _, o := range objs {
		pt, ok := podTemplate(t, o)
		if !ok {
			continue
		}
		where := fmt.Sprintf("%s: %s %s", origin(o), o.GetKind(), o.GetName())
		var cmName string
		for _, c := range slices.Concat(pt.Spec.InitContainers, pt.Spec.Containers) {
			for _, m := range c.VolumeMounts {
				if m.MountPath != "/etc/kolla-agent" {
					continue
				}
				for _, v := range pt.Spec.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						cmName = v.ConfigMap.Name
					}
				}
			}
		}
		if cmName == "" {
			continue // no agent, or one that needs no config (a wait)
		}
		cm := configMaps[cmName]
		if cm == nil || cm.Data["agent.yaml"] == "" {
			t.Errorf("%s: /etc/kolla-agent is ConfigMap %s, which has no agent.yaml", where, cmName)
			continue
		}
		cfg, err := agentconfig.Parse("ConfigMap "+cmName+" agent.yaml", []byte(cm.Data["agent.yaml"]))
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		var templates []string
		for _, r := range cfg.Render {
			templates = append(templates, cm.Data[path.Base(r.Src)])
		}
		if cfg.Bootstrap.Job != "" {
			templates = append(templates, cm.Data[path.Base(cfg.Bootstrap.Job)])
		}
		owner := strings.ToLower(o.GetKind()) + "/" + o.GetName()
		own, others := rbac.Rules(cfg, "openstack", templates, rbac.Options{Owner: owner})
		var want []rbacv1.PolicyRule
		for _, r := range own {
			want = append(want, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs, ResourceNames: r.ResourceNames})
		}
		if len(others) > 0 {
			t.Errorf("%s: its agent.yaml reads objects of other namespaces %v: the slice is one namespace", where, slices.Collect(maps.Keys(others)))
		}
		sa := pt.Spec.ServiceAccountName
		got := bound[sa]
		switch {
		case sa == "" || sa == "default":
			t.Errorf("%s: runs its agent as the namespace's default ServiceAccount; give it its own", where)
		case len(got) != 1:
			t.Errorf("%s: ServiceAccount %s is bound to %v; want one Role, its own", where, sa, got)
		case !slices.Equal(ruleSet(roles[got[0]]), ruleSet(want)):
			t.Errorf("%s: Role %s is not what its agent.yaml needs (regenerate: make build && bash hack/service-roles.sh; owner %s, ServiceAccount %s)\nhas:  %q\nwant: %q",
				where, got[0], owner, sa, ruleSet(roles[got[0]]), ruleSet(want))
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no pod of the slice mounts an agent.yaml at /etc/kolla-agent")
	}
}

// Every agent config under examples/ passes `kolla-agent config check`:
// each agent.yaml file (with the kolla config.json beside it, if any), and
// each agent.yaml embedded in a ConfigMap, of a manifest or of the
// kustomization's build (checked with the ConfigMap's other keys beside it,
// as the pod sees them). A broken copy of an example fails, exit 1, naming
// the file and the field.
func TestExampleAgentConfigsCheck(t *testing.T) {
	t.Setenv("KOLLA_AGENT_CONFIG", "")
	check := func(t *testing.T, config, kolla string) (code int, stdout, stderr string) {
		t.Helper()
		args := []string{"config", "check", "--config", config}
		if kolla != "" {
			args = append(args, "--kolla-config", kolla)
		}
		var out, errOut bytes.Buffer
		code = run(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	var files []string
	err := filepath.WalkDir(examplesDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() == "agent.yaml" {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no agent.yaml under examples/: %v", err)
	}
	for _, p := range files {
		rel, _ := filepath.Rel(examplesDir, p)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			kolla := filepath.Join(filepath.Dir(p), "config.json")
			if _, err := os.Stat(kolla); err != nil {
				kolla = ""
			}
			if code, out, errOut := check(t, p, kolla); code != 0 {
				t.Errorf("kolla-agent config check --config %s: exit %d\n%s%s", p, code, errOut, out)
			}
		})
	}

	// agent.yaml in ConfigMaps: of the manifests, and of the build.
	type embedded struct {
		where string
		data  map[string]string
	}
	var cms []embedded
	addCM := func(where string, o *unstructured.Unstructured) {
		if o.GetKind() != "ConfigMap" {
			return
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		if _, ok := data["agent.yaml"]; ok {
			cms = append(cms, embedded{where + ": ConfigMap " + o.GetName(), data})
		}
	}
	for _, rel := range exampleFiles(t) {
		objs, _ := exampleManifest(t, rel)
		for _, o := range objs {
			addCM("examples/"+rel, o)
		}
	}
	objs, _, _ := kustomizeExamples(t)
	for _, o := range objs {
		addCM("kustomize build examples/", o)
	}
	if len(cms) == 0 {
		t.Errorf("no ConfigMap with an agent.yaml in the build")
	}
	for _, cm := range cms {
		t.Run(cm.where, func(t *testing.T) {
			dir := t.TempDir()
			for k, v := range cm.data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			kolla := ""
			if _, ok := cm.data["config.json"]; ok {
				kolla = filepath.Join(dir, "config.json")
			}
			if code, out, errOut := check(t, filepath.Join(dir, "agent.yaml"), kolla); code != 0 {
				t.Errorf("%s: kolla-agent config check: exit %d\n%s%s", cm.where, code, errOut, out)
			}
		})
	}

	// Broken copies of keystone's: a bad field, and a template that does
	// not parse (found beside agent.yaml, as in the ConfigMap).
	for _, tc := range []struct {
		name, file, old, new, field string
	}{
		{"bad field", "agent.yaml", "  timeout: 10m\n  wait:", "  timeout: ten minutes\n  wait:", "dependencies.timeout"},
		{"bad template", "keystone-cache.conf.tmpl", "{{ podIP }}", "{{ podIP }", "render[0].src"},
	} {
		t.Run("broken/"+tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"agent.yaml", "config.json", "keystone-cache.conf.tmpl", "db-sync-job.yaml"} {
				b, err := os.ReadFile(filepath.Join(examplesDir, "keystone", f))
				if err != nil {
					t.Fatal(err)
				}
				if f == tc.file {
					if !bytes.Contains(b, []byte(tc.old)) {
						t.Fatalf("examples/keystone/%s no longer has %q to break", f, tc.old)
					}
					b = bytes.Replace(b, []byte(tc.old), []byte(tc.new), 1)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			config := filepath.Join(dir, "agent.yaml")
			code, out, errOut := check(t, config, filepath.Join(dir, "config.json"))
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s%s", code, errOut, out)
			}
			if !strings.Contains(errOut, config) || !strings.Contains(errOut, tc.field) {
				t.Errorf("stderr does not name %s and %s:\n%s", config, tc.field, errOut)
			}
		})
	}
}

// firstDifference shows where a and b, as indented JSON, first differ
// ("" if they do not), with a few lines of context.
func firstDifference(a, b any) string {
	ja, _ := json.MarshalIndent(a, "", "  ")
	jb, _ := json.MarshalIndent(b, "", "  ")
	la, lb := strings.Split(string(ja), "\n"), strings.Split(string(jb), "\n")
	i := 0
	for i < len(la) && i < len(lb) && la[i] == lb[i] {
		i++
	}
	if i == len(la) && i == len(lb) {
		return ""
	}
	from := max(i-3, 0)
	window := func(l []string) string { return strings.Join(l[from:min(i+3, len(l))], "\n") }
	return fmt.Sprintf("line %d, first:\n%s\nsecond:\n%s", i+1, window(la), window(lb))
}
