package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// ErrSuperseded: a newer revision of the owner is rolling out, so this
// pod's version will not be the one every replica runs: its later phases
// are the newer pods' to run.
var ErrSuperseded = errors.New("a newer revision is rolling out")

// Owner is the workload whose rollout gates the later phases (contract).
type Owner struct {
	Kind string // "deployment" or "statefulset"
	Name string
}

// revisionAnnotation is the Deployment controller's revision number, on
// the Deployment and on each of its ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// ownerRef is what the rollout reads of a pod or a ReplicaSet.
type ownerRef struct {
	metav1.ObjectMeta `json:"metadata"`
}

func (o *ownerRef) controller() *metav1.OwnerReference {
	for i, r := range o.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return &o.OwnerReferences[i]
		}
	}
	return nil
}

// revision is the pod's place in its owner's history: the Deployment's
// revision number of its ReplicaSet, or the StatefulSet's revision hash.
type revision struct {
	owner Owner
	value string
}

// ownRevision finds the pod's owner (unless given) and its revision, with
// one GET of the pod and, for a Deployment, one of its ReplicaSet.
func (c *Coordinator) ownRevision(ctx context.Context, pod string, given Owner) (revision, error) {
	owner, p, rs, err := podOwner(ctx, c.get, pod)
	if err != nil {
		return revision{}, err
	}
	if owner.Kind != "deployment" && owner.Kind != "statefulset" {
		return revision{}, fmt.Errorf("pod %s is owned by no Deployment or StatefulSet: phases after the rollout need one", pod)
	}
	if given.Name != "" && given != owner {
		return revision{}, fmt.Errorf("bootstrap.owner is %s/%s but pod %s belongs to %s %s", given.Kind, given.Name, pod, owner.Kind, owner.Name)
	}
	if owner.Kind == "deployment" {
		return revision{owner: owner, value: rs.Annotations[revisionAnnotation]}, nil
	}
	return revision{owner: owner, value: p.Labels["controller-revision-hash"]}, nil
}

// podOwner finds the workload that controls pod: a Deployment (through its
// ReplicaSet), a StatefulSet or a DaemonSet, with one GET of the pod and,
// for a Deployment, one of the ReplicaSet, which it returns too.
func podOwner(ctx context.Context, get func(context.Context, schema.GroupVersionResource, string, any) error, pod string) (Owner, *ownerRef, *ownerRef, error) {
	var p ownerRef
	if err := get(ctx, podsGVR, pod, &p); err != nil {
		return Owner{}, nil, nil, fmt.Errorf("own pod %s: %w", pod, err)
	}
	ref := p.controller()
	switch {
	case ref != nil && ref.Kind == "ReplicaSet":
		var rs ownerRef
		if err := get(ctx, replicaSetsGVR, ref.Name, &rs); err != nil {
			return Owner{}, nil, nil, fmt.Errorf("replicaset %s of pod %s: %w", ref.Name, pod, err)
		}
		d := rs.controller()
		if d == nil || d.Kind != "Deployment" {
			return Owner{}, nil, nil, fmt.Errorf("replicaset %s of pod %s has no Deployment", ref.Name, pod)
		}
		return Owner{Kind: "deployment", Name: d.Name}, &p, &rs, nil
	case ref != nil && ref.Kind == "StatefulSet":
		return Owner{Kind: "statefulset", Name: ref.Name}, &p, nil, nil
	case ref != nil && ref.Kind == "DaemonSet":
		return Owner{Kind: "daemonset", Name: ref.Name}, &p, nil, nil
	}
	return Owner{}, nil, nil, fmt.Errorf("pod %s is owned by no Deployment, StatefulSet or DaemonSet", pod)
}

var workloadGVRs = map[string]schema.GroupVersionResource{
	"deployment":  deploymentsGVR,
	"statefulset": {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"daemonset":   {Group: "apps", Version: "v1", Resource: "daemonsets"},
}

// Rollout sets the annotation key=value on the pod template of the
// workload that owns pod ns/pod, so that its controller replaces every pod.
// Every replica may call it with the same value: the template changes once,
// so N replicas make one rollout; a template that has the value already is
// not written. It returns the owner and whether this call changed it.
//
// owner, when known (a pod's controller never changes), is used as is:
// the rollout is then one GET of the workload and, when needed, one PATCH;
// with Owner{} it is first found from the pod (one GET of the pod and, for
// a Deployment, one of its ReplicaSet).
func Rollout(ctx context.Context, kube *discovery.Kube, ns, pod string, owner Owner, key, value string) (Owner, bool, error) {
	get := func(ctx context.Context, gvr schema.GroupVersionResource, name string, into any) error {
		u, err := kube.Resource(gvr, ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
	}
	if owner.Name == "" {
		var err error
		if owner, _, _, err = podOwner(ctx, get, pod); err != nil {
			return Owner{}, false, err
		}
	}
	gvr := workloadGVRs[owner.Kind]
	var w struct {
		Spec struct {
			Template struct {
				metav1.ObjectMeta `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := get(ctx, gvr, owner.Name, &w); err != nil {
		return owner, false, fmt.Errorf("%s %s: %w", owner.Kind, owner.Name, err)
	}
	if w.Spec.Template.Annotations[key] == value {
		return owner, false, nil
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}}}})
	if err != nil {
		return owner, false, err
	}
	if _, err := kube.Resource(gvr, ns).Patch(ctx, owner.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kolla-agent"}); err != nil {
		return owner, false, fmt.Errorf("%s %s: %w", owner.Kind, owner.Name, err)
	}
	return owner, true, nil
}

// PodImages returns the images of the pod's containers and init
// containers, sorted: what the pod runs, for a default version.
func (c *Coordinator) PodImages(ctx context.Context, pod string) ([]string, error) {
	if pod == "" {
		return nil, errors.New("no pod name")
	}
	var p struct {
		Spec struct {
			Containers     []struct{ Image string } `json:"containers"`
			InitContainers []struct{ Image string } `json:"initContainers"`
		} `json:"spec"`
	}
	if err := c.get(ctx, podsGVR, pod, &p); err != nil {
		return nil, fmt.Errorf("pod %s: %w", pod, err)
	}
	var images []string
	for _, ct := range append(p.Spec.Containers, p.Spec.InitContainers...) {
		images = append(images, ct.Image)
	}
	sort.Strings(images)
	return images, nil
}

func (c *Coordinator) get(ctx context.Context, gvr schema.GroupVersionResource, name string, into any) error {
	u, err := c.cfg.Kube.Resource(gvr, c.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

// workload is what the rollout reads of a Deployment or a StatefulSet.
type workload struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Replicas *int32 `json:"replicas,omitempty"`
	} `json:"spec"`
	Status struct {
		ObservedGeneration int64  `json:"observedGeneration,omitempty"`
		Replicas           int32  `json:"replicas,omitempty"`
		UpdatedReplicas    int32  `json:"updatedReplicas,omitempty"`
		AvailableReplicas  int32  `json:"availableReplicas,omitempty"`
		CurrentRevision    string `json:"currentRevision,omitempty"`
		UpdateRevision     string `json:"updateRevision,omitempty"`
	} `json:"status"`
}

// rolledOut says whether every replica of w runs revision r and is
// available, and if not, what is missing. superseded: w has moved on to a
// newer revision.
func rolledOut(w *workload, r revision) (done, superseded bool, why string) {
	want := int32(1)
	if w.Spec.Replicas != nil {
		want = *w.Spec.Replicas
	}
	st := w.Status
	current := w.Annotations[revisionAnnotation]
	if r.owner.Kind == "statefulset" {
		current = st.UpdateRevision
	}
	switch {
	case w.Generation > st.ObservedGeneration:
		return false, false, fmt.Sprintf("%s %s: the controller has not seen generation %d yet", r.owner.Kind, w.Name, w.Generation)
	case current != r.value:
		return false, true, fmt.Sprintf("%s %s is at revision %s, this pod at %s", r.owner.Kind, w.Name, current, r.value)
	case r.owner.Kind == "statefulset" && st.CurrentRevision != st.UpdateRevision:
		return false, false, fmt.Sprintf("statefulset %s: revision %s still has pods", w.Name, st.CurrentRevision)
	case st.UpdatedReplicas != want || st.Replicas != want || st.AvailableReplicas != want:
		// status.replicas counts the old ReplicaSets' pods too: equal to
		// updatedReplicas means none is left.
		return false, false, fmt.Sprintf("%s %s: %d of %d replicas updated, %d available, %d in all", r.owner.Kind, w.Name, st.UpdatedReplicas, want, st.AvailableReplicas, st.Replicas)
	}
	return true, false, ""
}

// WaitRollout waits, watching the owner (one narrowed list+watch), until
// every replica runs this pod's revision and is available: the
// observedGeneration is current, updatedReplicas == replicas ==
// availableReplicas == spec.replicas (so no old ReplicaSet has pods), and
// for a StatefulSet currentRevision == updateRevision. It returns
// ErrSuperseded when the owner has moved past this pod's revision.
func (c *Coordinator) WaitRollout(ctx context.Context, s Step, pod string, given Owner) error {
	r, err := c.ownRevision(ctx, pod, given)
	if err != nil {
		return err
	}
	gvr := deploymentsGVR
	if r.owner.Kind == "statefulset" {
		gvr = statefulSetGVR
	}
	what := r.owner.Kind + " " + r.owner.Name
	// The owner is watched only until the gate opens: the phase then runs
	// beside the service for as long as the pod lives, and a watch left
	// open would stream the owner's every status change to no one, and be
	// reopened each time the API server ends it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	owner := c.cfg.Kube.Observe(ctx, gvr, c.cfg.Namespace, discovery.Selector{Name: r.owner.Name}, func(op string, err error) {
		c.report(s, Waiting, "", "API %s of %s: %v", op, what, err)
	})
	last := ""
	for {
		var set []*unstructured.Unstructured
		select {
		case <-ctx.Done():
			return ctx.Err()
		case set = <-owner.Next():
		}
		if len(set) == 0 {
			last = what + " does not exist"
			c.report(s, Waiting, "", "%s", last)
			continue
		}
		var w workload
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(set[0].Object, &w); err != nil {
			continue
		}
		done, superseded, why := rolledOut(&w, r)
		switch {
		case done:
			c.log.Info("rollout complete: running the phases that wait for it", "owner", what, "revision", r.value)
			return nil
		case superseded:
			return fmt.Errorf("%w: %s", ErrSuperseded, why)
		}
		if why != last {
			last = why
			c.report(s, Waiting, "", "waiting for the rollout: %s", why)
		}
	}
}
