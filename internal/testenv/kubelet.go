package testenv

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// DefaultNode is the node Env.Kubelet binds unscheduled pods to.
const DefaultNode = "testenv-node"

// nodeIP is every stand-in node's InternalIP and so its pods' hostIP.
const nodeIP = "127.0.0.1"

// Kubelet stands in for the scheduler and the kubelet: no container runs,
// but Node objects, pod bindings and pod status look as if they did, so the
// real Job controller, EndpointSlice controller and CoreDNS react to them.
type Kubelet struct {
	client kubernetes.Interface
	node   string
}

// NewKubelet returns a stand-in that binds unscheduled pods to node.
func NewKubelet(client kubernetes.Interface, node string) *Kubelet {
	return &Kubelet{client: client, node: node}
}

// Kubelet returns a stand-in with admin rights that binds unscheduled pods
// to DefaultNode.
func (e *Env) Kubelet() *Kubelet { return NewKubelet(e.client, DefaultNode) }

// EnsureNode creates the Node if it does not exist, reports it Ready and
// lifts its not-ready taint. The EndpointSlice controller ignores pods on
// nodes that do not exist, and the DaemonSet controller only creates pods
// for existing, untainted nodes.
func (k *Kubelet) EnsureNode(ctx context.Context, name string) error {
	nodes := k.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
			}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				n, err = nodes.Get(ctx, name, metav1.GetOptions{})
			}
		}
		if err != nil {
			return err
		}
		// The TaintNodesByCondition admission plugin taints a new Node
		// not-ready; the node lifecycle controller, which does not run here,
		// would lift it once the node reports Ready. DaemonSet pods do not
		// tolerate it.
		if i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }); i >= 0 {
			n.Spec.Taints = slices.Delete(n.Spec.Taints, i, i+1)
			if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if c := nodeCondition(n, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue {
			return nil
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "testenv stand-in", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		n.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: nodeIP},
			{Type: corev1.NodeHostName, Address: name},
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("testenv: node %s: %w", name, err)
	}
	return nil
}

// BindPod schedules the pod onto node (creating the node if needed) through
// pods/binding, as the scheduler would.
func (k *Kubelet) BindPod(ctx context.Context, namespace, pod, node string) error {
	if err := k.EnsureNode(ctx, node); err != nil {
		return err
	}
	err := k.client.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("testenv: bind pod %s/%s to %s: %w", namespace, pod, node, err)
	}
	return nil
}

// SetPodRunning reports the pod Running with ip as its address, every
// container started and ready as given (init containers completed). An
// unscheduled pod is bound first: to the node its node affinity names
// (DaemonSet pods), else to the Kubelet's node.
func (k *Kubelet) SetPodRunning(ctx context.Context, namespace, name, ip string, ready bool) error {
	return k.updateStatus(ctx, namespace, name, func(p *corev1.Pod) error {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.InitContainerStatuses = nil
		for _, c := range p.Spec.InitContainers {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, terminatedStatus(p, c, 0, now))
		}
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: "testenv://" + c.Image, ContainerID: containerID(p, c.Name),
				Ready: ready, Started: new(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		setReadiness(p, now, "")
		return nil
	})
}

// SetContainerReady flips one container's ready flag and recomputes the
// pod's Ready and ContainersReady conditions from all containers, as the
// kubelet does after a readiness probe changes.
func (k *Kubelet) SetContainerReady(ctx context.Context, namespace, pod, container string, ready bool) error {
	return k.updateStatus(ctx, namespace, pod, func(p *corev1.Pod) error {
		for i := range p.Status.ContainerStatuses {
			if cs := &p.Status.ContainerStatuses[i]; cs.Name == container {
				cs.Ready = ready
				setReadiness(p, metav1.Now(), "")
				return nil
			}
		}
		return fmt.Errorf("no status for container %q (call SetPodRunning first)", container)
	})
}

// SetPodSucceeded reports every container terminated with exit code 0 and
// the pod Succeeded.
func (k *Kubelet) SetPodSucceeded(ctx context.Context, namespace, name string) error {
	return k.setTerminated(ctx, namespace, name, corev1.PodSucceeded, 0)
}

// SetPodFailed reports the pod Failed, its containers terminated with
// exitCode (which should not be 0).
func (k *Kubelet) SetPodFailed(ctx context.Context, namespace, name string, exitCode int32) error {
	return k.setTerminated(ctx, namespace, name, corev1.PodFailed, exitCode)
}

func (k *Kubelet) setTerminated(ctx context.Context, namespace, name string, phase corev1.PodPhase, exitCode int32) error {
	return k.updateStatus(ctx, namespace, name, func(p *corev1.Pod) error {
		now := metav1.Now()
		p.Status.Phase = phase
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.InitContainerStatuses = nil
		for _, c := range p.Spec.InitContainers {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, terminatedStatus(p, c, 0, now))
		}
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, terminatedStatus(p, c, exitCode, now))
		}
		setReadiness(p, now, "PodCompleted")
		return nil
	})
}

// CompleteJobPod waits for an active pod of the Job and reports it Succeeded.
func (k *Kubelet) CompleteJobPod(ctx context.Context, namespace, job string) (*corev1.Pod, error) {
	return k.finishJobPod(ctx, namespace, job, corev1.PodSucceeded, 0)
}

// FailJobPod waits for an active pod of the Job and reports it Failed with
// exitCode.
func (k *Kubelet) FailJobPod(ctx context.Context, namespace, job string, exitCode int32) (*corev1.Pod, error) {
	return k.finishJobPod(ctx, namespace, job, corev1.PodFailed, exitCode)
}

// RunJobPod stands in for the kubelet running a Job's pod: it waits for an
// active pod of the Job, reports it running, calls run with it (the test
// runs the pod's command locally) and reports the pod terminated with the
// exit code run returns: Succeeded for 0, else Failed.
func (k *Kubelet) RunJobPod(ctx context.Context, namespace, job string, run func(context.Context, *corev1.Pod) int32) (*corev1.Pod, int32, error) {
	pod, err := k.WaitForPod(ctx, namespace, "batch.kubernetes.io/job-name="+job)
	if err != nil {
		return nil, 0, fmt.Errorf("testenv: pod of job %s/%s: %w", namespace, job, err)
	}
	if err := k.SetPodRunning(ctx, namespace, pod.Name, nodeIP, false); err != nil {
		return nil, 0, err
	}
	code := run(ctx, pod)
	phase := corev1.PodSucceeded
	if code != 0 {
		phase = corev1.PodFailed
	}
	if err := k.setTerminated(ctx, namespace, pod.Name, phase, code); err != nil {
		return nil, code, err
	}
	return pod, code, nil
}

func (k *Kubelet) finishJobPod(ctx context.Context, namespace, job string, phase corev1.PodPhase, exitCode int32) (*corev1.Pod, error) {
	pod, err := k.WaitForPod(ctx, namespace, "batch.kubernetes.io/job-name="+job)
	if err != nil {
		return nil, fmt.Errorf("testenv: pod of job %s/%s: %w", namespace, job, err)
	}
	if err := k.setTerminated(ctx, namespace, pod.Name, phase, exitCode); err != nil {
		return nil, err
	}
	return pod, nil
}

// WaitForPod waits for a pod matching the label selector that has not
// terminated and is not being deleted, and returns it. It lists, then
// watches from the list's resourceVersion, and lists again whenever the
// watch ends (a plain loop rather than client-go's UntilWithSync, whose
// reflector logs an error each time it is cancelled).
func (k *Kubelet) WaitForPod(ctx context.Context, namespace, selector string) (*corev1.Pod, error) {
	pods := k.client.CoreV1().Pods(namespace)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			if active(&list.Items[i]) {
				return &list.Items[i], nil
			}
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return nil, err
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && active(p) {
				w.Stop()
				return p, nil
			}
			if ev.Type == watch.Error {
				break // e.g. 410 Gone: list again
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func active(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// updateStatus binds the pod if needed (or makes sure its node exists),
// applies mutate to its status and writes it, retrying on conflicts with the
// controllers.
func (k *Kubelet) updateStatus(ctx context.Context, namespace, name string, mutate func(*corev1.Pod) error) error {
	pods := k.client.CoreV1().Pods(namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName == "" {
			if err := k.BindPod(ctx, namespace, name, k.nodeFor(p)); err != nil {
				return err
			}
			if p, err = pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		} else if err := k.EnsureNode(ctx, p.Spec.NodeName); err != nil {
			// Created with spec.nodeName set: the node must exist too, or the
			// EndpointSlice controller ignores the pod.
			return err
		}
		if err := mutate(p); err != nil {
			return err
		}
		if p.Status.HostIP == "" {
			p.Status.HostIP = nodeIP
			p.Status.HostIPs = []corev1.HostIP{{IP: nodeIP}}
		}
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("testenv: pod %s/%s status: %w", namespace, name, err)
	}
	return nil
}

// nodeFor picks the node for an unscheduled pod: the one its required node
// affinity names by metadata.name (how the DaemonSet controller pins its
// pods), else the Kubelet's node.
func (k *Kubelet) nodeFor(p *corev1.Pod) string {
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return k.node
}

// setReadiness sets the pod's conditions from its container statuses. A
// non-empty reason marks a terminated pod (the kubelet's "PodCompleted").
func setReadiness(p *corev1.Pod, now metav1.Time, reason string) {
	ready := reason == "" && len(p.Status.ContainerStatuses) > 0
	for _, cs := range p.Status.ContainerStatuses {
		ready = ready && cs.Ready
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	setCondition(p, corev1.PodScheduled, corev1.ConditionTrue, "", now)
	setCondition(p, corev1.PodInitialized, corev1.ConditionTrue, "", now)
	setCondition(p, corev1.ContainersReady, status, reason, now)
	setCondition(p, corev1.PodReady, status, reason, now)
}

func setCondition(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus, reason string, now metav1.Time) {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == t {
			if c.Status != s {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason = s, reason
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now})
}

func terminatedStatus(p *corev1.Pod, c corev1.Container, exitCode int32, now metav1.Time) corev1.ContainerStatus {
	reason := "Completed"
	if exitCode != 0 {
		reason = "Error"
	}
	started := now
	for _, cs := range append(p.Status.ContainerStatuses, p.Status.InitContainerStatuses...) {
		if cs.Name == c.Name && cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
	}
	return corev1.ContainerStatus{
		Name: c.Name, Image: c.Image, ImageID: "testenv://" + c.Image, ContainerID: containerID(p, c.Name),
		Started: new(false),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: reason, StartedAt: started, FinishedAt: now, ContainerID: containerID(p, c.Name),
		}},
	}
}

func containerID(p *corev1.Pod, container string) string {
	return "testenv://" + string(p.UID) + "/" + container
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
