package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// postEvent posts one Warning Event on the agent's own pod, synchronously: the
// process is about to exit, and client-go's event recorders deliver
// asynchronously from a queue that would have to be flushed first.
func postEvent(ctx context.Context, kube *discovery.Kube, ns, pod, reason, msg string) error {
	p, err := kube.Pod(ctx, ns, pod)
	if err != nil {
		return err
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod, UID: p.UID, ResourceVersion: p.ResourceVersion,
		},
		Reason:              reason,
		Message:             truncate(msg, 1024),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "kolla-agent", Host: p.Spec.NodeName},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "kolla-agent",
		ReportingInstance:   pod,
		Action:              "Wait",
	}
	return kube.CreateEvent(ctx, ev)
}
