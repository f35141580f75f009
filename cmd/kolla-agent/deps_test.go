package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedappsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/internal/testenv"

	"github.com/kolla-agent/kolla-agent/internal/poll"
)

func mkPod(t testing.TB, ns, name string, labels map[string]string, containers ...string) *corev1.Pod {
	t.Helper()
	if len(containers) == 0 {
		containers = []string{"main"}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "none"})
	}
	p, err := client().CoreV1().Pods(ns).Create(ctxT(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.env.Kubelet().BindPod(ctxT(t), ns, name, testenv.DefaultNode); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkService(t testing.TB, ns, name string, headless bool, selector map[string]string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "db", Port: 3306}}},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if _, err := client().CoreV1().Services(ns).Create(ctxT(t), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mkJob(t testing.TB, ns, name string, labels map[string]string) {
	t.Helper()
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "db-sync", Image: "none"}},
			}},
		},
	}
	if _, err := client().BatchV1().Jobs(ns).Create(ctxT(t), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setReady(t testing.TB, ns, pod, ip string, ready bool) {
	t.Helper()
	if err := s.env.Kubelet().SetPodRunning(ctxT(t), ns, pod, ip, ready); err != nil {
		t.Fatal(err)
	}
}

// A Service's endpoints, made by the real EndpointSlice controller from a
// pod the stand-in kubelet reports Ready.
func TestServiceDependency(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "mariadb-0", "10.10.0.5", false)

	a := startAgent(t, agentEnv(t, ns), "wait", "--timeout", "2m", "service:mariadb", "service:"+ns+"/mariadb")
	a.waitLog("0 of 1 endpoints ready")
	a.running()
	setReady(t, ns, "mariadb-0", "10.10.0.5", true)
	a.wantExit(0)
	if !strings.Contains(a.out.String(), "1 of 1 endpoints ready: 10.10.0.5") {
		t.Errorf("final state not reported:\n%s", a.out.String())
	}
}

// Jobs by name and by labels; the real Job controller writes Complete once
// the stand-in reports the Job's pod Succeeded.
func TestJobDependency(t *testing.T) {
	ns := namespace(t)
	mkJob(t, ns, "keystone-db-sync", nil)
	mkJob(t, ns, "keystone-fernet-setup", map[string]string{"application": "keystone", "component": "setup"})
	mkJob(t, ns, "keystone-credential-setup", map[string]string{"application": "keystone", "component": "setup"})

	a := startAgent(t, agentEnv(t, ns), "wait", "job:keystone-db-sync", "job:application=keystone,component=setup")
	a.waitLog("keystone-db-sync (Running")
	a.waitLog("2 of 2 not complete")
	for _, j := range []string{"keystone-db-sync", "keystone-fernet-setup"} {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	a.waitLog("1 of 2 not complete: keystone-credential-setup")
	a.running()
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, "keystone-credential-setup"); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// A failed Job ends the wait at once with exit 2; the reason goes to the
// termination message and to an Event on the agent's pod.
func TestFailedJobEndsWait(t *testing.T) {
	ns := namespace(t)
	mkJob(t, ns, "glance-db-sync", nil)
	mkPod(t, ns, "glance-api-0", nil)
	term := filepath.Join(t.TempDir(), "termination-log")

	env := append(agentEnv(t, ns), "POD_NAME=glance-api-0")
	a := startAgent(t, env, "wait", "--timeout", "10m", "--termination-log", term, "job:glance-db-sync")
	a.waitLog("glance-db-sync (Running")
	if _, err := s.env.Kubelet().FailJobPod(ctxT(t), ns, "glance-db-sync", 3); err != nil {
		t.Fatal(err)
	}
	a.wantExit(2)
	msg, err := os.ReadFile(term)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg), "job "+ns+"/glance-db-sync") {
		t.Errorf("termination message %q does not name the failed job", msg)
	}
	evs, err := client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.name=glance-api-0"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if e.Reason == "DependencyWaitFailed" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "glance-db-sync") {
			found = true
		}
	}
	if !found {
		t.Errorf("no DependencyWaitFailed event on the pod: %+v", evs.Items)
	}
}

// A wait that times out exits 2 and names each dependency not ready with the
// last state seen.
func TestTimeout(t *testing.T) {
	ns := namespace(t)
	term := filepath.Join(t.TempDir(), "termination-log")
	a := startAgent(t, agentEnv(t, ns), "wait", "--timeout", "3s", "--termination-log", term, "job:never", "service:nobody")
	a.wantExit(2)
	msg, _ := os.ReadFile(term)
	// The Service is watched; the Job, whose turn comes after it
	// (discovery/turn.go), is said as last listed.
	for _, want := range []string{"timed out", "job:never (waiting: no job " + ns + "/never (as last listed", "service:nobody (waiting: no EndpointSlices (no Service, or no selector))"} {
		if !strings.Contains(string(msg), want) {
			t.Errorf("termination message %q lacks %q", msg, want)
		}
	}
}

// The DaemonSet's pod on the agent's node, created by the real DaemonSet
// controller for the stand-in node.
func TestDaemonSetDependency(t *testing.T) {
	ns := namespace(t)
	labels := map[string]string{"app": "openvswitch"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "openvswitch", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ovs", Image: "none"}}},
			},
		},
	}
	mkPod(t, ns, "neutron-ovs-agent-x", nil)
	env := append(agentEnv(t, ns), "POD_NAME=neutron-ovs-agent-x")
	a := startAgent(t, env, "wait", "daemonset:openvswitch")
	a.waitLog("daemonset " + ns + "/openvswitch does not exist")
	if _, err := client().AppsV1().DaemonSets(ns).Create(ctxT(t), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := s.env.Kubelet().WaitForPod(ctxT(t), ns, "app=openvswitch")
	if err != nil {
		t.Fatal(err)
	}
	setReady(t, ns, p.Name, "10.10.1.1", false)
	a.waitLog("no pod ready on node " + testenv.DefaultNode)
	a.running()
	setReady(t, ns, p.Name, "10.10.1.1", true)
	a.wantExit(0)

	// On a node where the DaemonSet has no pod: kubernetes-entrypoint's rule.
	env = append(agentEnv(t, ns), "POD_NAME=neutron-ovs-agent-x", "NODE_NAME=elsewhere")
	b := startAgent(t, env, "wait", "daemonset:openvswitch")
	b.wantExit(0)
	if !strings.Contains(b.out.String(), "counted as satisfied") {
		t.Errorf("the no-pod-on-node rule was not logged:\n%s", b.out.String())
	}
}

// Pods by labels, on the same node; and a container of the agent's own pod.
func TestPodAndContainerDependencies(t *testing.T) {
	ns := namespace(t)
	mkPod(t, ns, "nova-compute-0", nil, "nova-compute", "libvirt-exporter")
	mkPod(t, ns, "libvirt-0", map[string]string{"application": "libvirt"})
	setReady(t, ns, "libvirt-0", "10.10.2.1", false)
	setReady(t, ns, "nova-compute-0", "10.10.2.2", false)

	env := append(agentEnv(t, ns), "POD_NAME=nova-compute-0")
	a := startAgent(t, env, "wait", "pod:application=libvirt@samenode", "container:libvirt-exporter")
	a.waitLog("no pod ready on node")
	a.waitLog("container libvirt-exporter running, not ready")
	// One lookup watches; the other waits for the wait's one watch and
	// says that what it shows is as last listed (discovery/turn.go).
	a.waitLog("looked at again when the wait's one watch is free")
	setReady(t, ns, "libvirt-0", "10.10.2.1", true)
	a.running()
	if err := s.env.Kubelet().SetContainerReady(ctxT(t), ns, "nova-compute-0", "libvirt-exporter", true); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
	for _, want := range []string{"pod libvirt-0 is ready", "container libvirt-exporter is ready"} {
		if !strings.Contains(a.out.String(), want) {
			t.Errorf("the agent never said %q:\n%s", want, a.out.String())
		}
	}

	// A container the pod does not have can never be ready: exit 2 at once.
	b := startAgent(t, env, "wait", "--timeout", "10m", "container:nope")
	b.wantExit(2)
	if !strings.Contains(b.out.String(), `no container "nope"`) {
		t.Errorf("missing container not named:\n%s", b.out.String())
	}
}

// Any resource through the dynamic client: the CRD is installed after the
// agent starts, and a number field and a condition must match.
func TestResourceDependency(t *testing.T) {
	ns := namespace(t)
	rule := rbacv1.PolicyRule{APIGroups: []string{"example.kolla-agent.dev"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}}
	a := startAgent(t, agentEnv(t, ns, rule), "wait", "resource:example.kolla-agent.dev/v1/Widget/"+ns+"/w1?spec.size=3&condition=Ready")
	a.waitLog("not served")

	dyn, gvr := ensureCRD(t, "example.kolla-agent.dev", "widgets", "Widget")
	a.waitLog("does not exist")

	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.kolla-agent.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": ns},
		"spec":     map[string]any{"size": int64(3)},
	}}
	// Retry while the new CRD's storage comes up.
	var created *unstructured.Unstructured
	var err error
	eventually(t, "widget created", func() bool {
		created, err = dyn.Resource(gvr).Namespace(ns).Create(ctxT(t), w, metav1.CreateOptions{})
		return err == nil
	})
	a.waitLog("condition Ready not reported")
	a.running()
	created.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
	if _, err := dyn.Resource(gvr).Namespace(ns).UpdateStatus(ctxT(t), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// Cluster DNS through the real CoreDNS: a headless Service going from 0 to N
// ready endpoints.
func TestDNSHeadlessService(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "rabbitmq", true, map[string]string{"app": "rabbitmq"})
	for i, ip := range []string{"10.10.3.1", "10.10.3.2", "10.10.3.3"} {
		name := "rabbitmq-" + string(rune('0'+i))
		mkPod(t, ns, name, map[string]string{"app": "rabbitmq"})
		setReady(t, ns, name, ip, false)
	}
	a := startAgent(t, agentEnv(t, ns), "wait", "dns:rabbitmq."+ns, "dns:rabbitmq", "dns:_db._tcp.rabbitmq")
	a.waitLog("for rabbitmq." + ns + ".svc.cluster.local.")
	a.running()
	for i, ip := range []string{"10.10.3.1", "10.10.3.2", "10.10.3.3"} {
		setReady(t, ns, "rabbitmq-"+string(rune('0'+i)), ip, true)
	}
	a.wantExit(0)
	if !strings.Contains(a.out.String(), "10.10.3.") {
		t.Errorf("the answer's addresses are not in the summary:\n%s", a.out.String())
	}
	if !strings.Contains(a.out.String(), "_db._tcp.rabbitmq."+ns+".svc.cluster.local.") || !strings.Contains(a.out.String(), ":3306") {
		t.Errorf("the SRV answer (named port db) is not in the summary:\n%s", a.out.String())
	}
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 60*time.Second, what, cond)
}

// A Role that grants Endpoints but not EndpointSlices (written for older
// clusters): the service check falls back to the Endpoints object, which the
// real endpoints controller maintains.
func TestServiceFallsBackToEndpoints(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "mariadb-0", "10.10.6.1", true)
	env := agentEnv(t, ns)

	roles := client().RbacV1().Roles(ns)
	role, err := roles.Get(ctxT(t), "kolla-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := role.Rules[:0]
	for _, r := range role.Rules {
		if len(r.Resources) == 1 && r.Resources[0] == "endpointslices" {
			continue
		}
		kept = append(kept, r)
	}
	role.Rules = kept
	if _, err := roles.Update(ctxT(t), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer follows the Role through an informer: wait until the
	// agent's token is refused EndpointSlices.
	var kubeconfig string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "KUBECONFIG="); ok {
			kubeconfig = v
		}
	}
	cfg, err := testenv.LoadKubeconfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	eventually(t, "EndpointSlices forbidden", func() bool {
		_, err := sa.DiscoveryV1().EndpointSlices(ns).List(ctxT(t), metav1.ListOptions{})
		return apierrors.IsForbidden(err)
	})

	a := startAgent(t, env, "wait", "--timeout", "1m", "service:mariadb")
	a.wantExit(0)
	for _, want := range []string{"falling back to Endpoints", "1 of 1 endpoints ready: 10.10.6.1"} {
		if !strings.Contains(a.out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, a.out.String())
		}
	}
}

// ensureCRD installs a custom resource of group, version v1 (cluster-wide,
// once for the package: each test its own group, since a served group is
// visible to every other test) and returns an admin dynamic client and the
// resource.
func ensureCRD(t *testing.T, group, plural, kind string) (dynamic.Interface, schema.GroupVersionResource) {
	t.Helper()
	crdYAML := `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ` + plural + `.` + group + `}
spec:
  group: ` + group + `
  scope: Namespaced
  names: {plural: ` + plural + `, singular: ` + strings.ToLower(kind) + `, kind: ` + kind + `}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(crdYAML), &obj.Object); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(s.env.Admin())
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crdGVR).Create(ctxT(t), obj, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	return dyn, schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
}

// mkSurgeDeployment creates a Deployment named name (label app=name, one
// container of that name) that rolls out by surge: a new pod comes first
// and an old one goes only once the new one is ready. It returns the
// namespace's Deployments client.
func mkSurgeDeployment(t testing.TB, ns, name, image string, replicas int32) typedappsv1.DeploymentInterface {
	t.Helper()
	labels := map[string]string{"app": name}
	deps := client().AppsV1().Deployments(ns)
	if _, err := deps.Create(ctxT(t), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: image}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return deps
}
