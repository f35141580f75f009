package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// postEvent posts one Warning Event on the agent's own pod, synchronously: the
// process is about to exit, and client-go's event recorders deliver
// asynchronously from a queue that would have to be flushed first.
func postEvent(ctx context.Context, core corev1client.CoreV1Interface, ns, pod, reason, msg string) error {
	p, err := core.Pods(ns).Get(ctx, pod, metav1.GetOptions{})
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
	_, err = core.Events(ns).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
