package discovery

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Pure evaluation of API objects; the watches themselves are tested against a
// real API server in cmd/kolla-agent.

// asListed is what the informer hands the checks: unstructured objects.
func asListed(t *testing.T, objs ...runtime.Object) []any {
	t.Helper()
	out := make([]any, len(objs))
	for i, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = &unstructured.Unstructured{Object: m}
	}
	return out
}

// local converts a typed API object to the check's own struct, as decodeAll
// does for what the informer lists.
func local[T any](t *testing.T, o runtime.Object) *T {
	t.Helper()
	got := decodeAll[T](asListed(t, o))
	if len(got) != 1 {
		t.Fatalf("%T did not decode", o)
	}
	return got[0]
}

func localPods(t *testing.T, ps ...*corev1.Pod) []*pod {
	out := make([]*pod, len(ps))
	for i, p := range ps {
		out[i] = local[pod](t, p)
	}
	return out
}

func mkJob(name string, conds ...batchv1.JobConditionType) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	for _, c := range conds {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: c, Status: corev1.ConditionTrue, Reason: "R" + string(c), Message: "m"})
	}
	return j
}

func TestJobsObservation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		objs   []runtime.Object
		state  State
		detail string
	}{
		{"none", nil, Waiting, "no jobs"},
		{"running", []runtime.Object{mkJob("a")}, Waiting, "1 of 1 not complete: a (active 0"},
		{"complete", []runtime.Object{mkJob("a", batchv1.JobComplete)}, Ready, "job a complete"},
		{"all complete", []runtime.Object{mkJob("a", batchv1.JobComplete), mkJob("b", batchv1.JobSuccessCriteriaMet, batchv1.JobComplete)}, Ready, "2 jobs complete"},
		{"one pending", []runtime.Object{mkJob("a", batchv1.JobComplete), mkJob("b")}, Waiting, "1 of 2 not complete: b"},
		{"failed wins", []runtime.Object{mkJob("a", batchv1.JobComplete), mkJob("b", batchv1.JobFailed)}, Failed, "job ns/b failed: RFailed: m"},
		{"failure target", []runtime.Object{mkJob("a", batchv1.JobFailureTarget)}, Failed, "is failing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := jobsObservation(asListed(t, tc.objs...), "jobs")
			if o.State != tc.state || !strings.Contains(o.Detail, tc.detail) {
				t.Errorf("got %s %q, want %s containing %q", o.State, o.Detail, tc.state, tc.detail)
			}
		})
	}
	// A condition present but False is not complete.
	j := mkJob("a")
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionFalse}}
	if o := jobsObservation(asListed(t, j), "jobs"); o.State != Waiting {
		t.Errorf("Complete=False counted as %s", o.State)
	}
}

func slice(ready ...*bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{}
	for i, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0." + string(rune('1'+i))}, Conditions: discoveryv1.EndpointConditions{Ready: r}})
	}
	return s
}

func TestSlicesObservation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		objs   []runtime.Object
		state  State
		detail string
	}{
		{"no slices", nil, Waiting, "no EndpointSlices"},
		{"empty slice", []runtime.Object{slice()}, Waiting, "0 of 0 endpoints ready"},
		{"not ready", []runtime.Object{slice(ptr.To(false))}, Waiting, "0 of 1"},
		{"ready nil counts", []runtime.Object{slice(nil)}, Ready, "1 of 1 endpoints ready: 10.0.0.1"},
		{"across slices", []runtime.Object{slice(ptr.To(false)), slice(ptr.To(true), ptr.To(false))}, Ready, "1 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := slicesObservation(asListed(t, tc.objs...))
			if o.State != tc.state || !strings.Contains(o.Detail, tc.detail) {
				t.Errorf("got %s %q, want %s containing %q", o.State, o.Detail, tc.state, tc.detail)
			}
		})
	}
	ep := &corev1.Endpoints{Subsets: []corev1.EndpointSubset{{
		Addresses:         []corev1.EndpointAddress{{IP: "10.1.0.2"}},
		NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.1.0.3"}},
	}}}
	if o := endpointsObservation(asListed(t, ep)); o.State != Ready || !strings.Contains(o.Detail, "1 of 2 endpoints ready: 10.1.0.2") {
		t.Errorf("endpoints: %+v", o)
	}
	if o := endpointsObservation(nil); o.State != Waiting {
		t.Errorf("no endpoints: %+v", o)
	}
}

func mkPod(name string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

func TestPodsAndDaemonSet(t *testing.T) {
	if o := podsObservation(nil, ""); o.State != Waiting {
		t.Errorf("no pods: %+v", o)
	}
	if o := podsObservation(localPods(t, mkPod("a", false), mkPod("b", true)), ""); o.State != Ready || !strings.Contains(o.Detail, "pod b") {
		t.Errorf("one ready: %+v", o)
	}
	deleting := mkPod("c", true)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	if o := podsObservation(localPods(t, deleting), ""); o.State != Waiting {
		t.Errorf("a pod being deleted counted as ready: %+v", o)
	}

	ds := local[daemonSet](t, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ovs", Namespace: "ns", UID: "u1"}})
	own := mkPod("ovs-x", false)
	own.Spec.NodeName = "n1"
	own.OwnerReferences = []metav1.OwnerReference{{UID: "u1", Controller: ptr.To(true), Kind: "DaemonSet", Name: "ovs"}}
	stranger := mkPod("other", true) // matches the selector but is not the DaemonSet's
	stranger.Spec.NodeName = "n1"
	if o := daemonPodObservation(ds, localPods(t, stranger), "n1"); o.State != Ready || !strings.Contains(o.Detail, "counted as satisfied") {
		t.Errorf("no own pod on node: %+v", o)
	}
	if o := daemonPodObservation(ds, localPods(t, own, stranger), "n1"); o.State != Waiting {
		t.Errorf("own pod not ready, stranger ready: %+v", o)
	}
	own.Status.Conditions[0].Status = corev1.ConditionTrue
	if o := daemonPodObservation(ds, localPods(t, own), "n1"); o.State != Ready {
		t.Errorf("own pod ready: %+v", o)
	}
	// Not yet scheduled, but targeted at n1 by the DaemonSet controller's node
	// affinity: it is n1's pod, not "no pod on the node".
	pending := mkPod("ovs-y", false)
	pending.OwnerReferences = own.OwnerReferences
	pending.Spec.NodeName = ""
	pending.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}},
	}}}
	if o := daemonPodObservation(ds, localPods(t, pending), "n1"); o.State != Waiting {
		t.Errorf("unscheduled pod targeted at this node: %+v", o)
	}
	if o := daemonPodObservation(ds, localPods(t, pending), "n2"); o.State != Ready {
		t.Errorf("pod targeted at another node: %+v", o)
	}
}

func TestContainerObservation(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "api"}, {Name: "proxy"}}, InitContainers: []corev1.Container{{Name: "sidecar"}}},
		Status: corev1.PodStatus{
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "api", Ready: true}, {Name: "proxy", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "sidecar", Ready: true}},
		},
	}
	for _, tc := range []struct {
		name   string
		state  State
		detail string
	}{
		{"api", Ready, "ready"},
		{"proxy", Waiting, "CrashLoopBackOff"},
		{"sidecar", Ready, "ready"},
		{"nope", Failed, `no container "nope"`},
	} {
		o := containerObservation(local[pod](t, p), tc.name)
		if o.State != tc.state || !strings.Contains(o.Detail, tc.detail) {
			t.Errorf("%s: got %+v", tc.name, o)
		}
	}
}

func TestResourceObservation(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"replicas": int64(3), "paused": false, "ratio": 0.5, "name": "x", "tags": []any{"a"}},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Ready", "status": "True"},
			map[string]any{"type": "Degraded", "status": "False"},
		}},
	}}
	for _, tc := range []struct {
		name   string
		ref    ResourceRef
		state  State
		detail string
	}{
		{"int as number", ResourceRef{Fields: []FieldMatch{{"spec.replicas", "3"}}}, Ready, "matches"},
		{"int as float", ResourceRef{Fields: []FieldMatch{{"spec.replicas", "3.0"}}}, Ready, ""},
		{"int mismatch", ResourceRef{Fields: []FieldMatch{{"spec.replicas", "2"}}}, Waiting, "spec.replicas is 3, want 2"},
		{"string 3 is not a number field", ResourceRef{Fields: []FieldMatch{{"spec.name", "x"}}}, Ready, ""},
		{"bool", ResourceRef{Fields: []FieldMatch{{"spec.paused", "false"}}}, Ready, ""},
		{"bool is not a string", ResourceRef{Fields: []FieldMatch{{"spec.paused", "no"}}}, Waiting, "is false, want no"},
		{"float", ResourceRef{Fields: []FieldMatch{{"spec.ratio", "0.50"}}}, Ready, ""},
		{"list as JSON", ResourceRef{Fields: []FieldMatch{{"spec.tags", `["a"]`}}}, Ready, ""},
		{"missing field", ResourceRef{Fields: []FieldMatch{{"status.phase", "Running"}}}, Waiting, "status.phase is not set"},
		{"condition", ResourceRef{Conditions: []ConditionMatch{{"Ready", "True"}, {"Degraded", "False"}}}, Ready, ""},
		{"condition mismatch", ResourceRef{Conditions: []ConditionMatch{{"Degraded", "True"}}}, Waiting, "condition Degraded is False, want True"},
		{"condition absent", ResourceRef{Conditions: []ConditionMatch{{"Synced", "True"}}}, Waiting, "not reported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := resourceObservation(u, &tc.ref, "things x")
			if o.State != tc.state || !strings.Contains(o.Detail, tc.detail) {
				t.Errorf("got %s %q, want %s containing %q", o.State, o.Detail, tc.state, tc.detail)
			}
		})
	}
}
