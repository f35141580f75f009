package agent

import (
	"context"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/redact"
)

// event is one Event: its type (Normal or Warning), reason and message.
type event struct{ typ, reason, msg string }

// podRef names the pod Events go on: the agent's own.
type podRef struct{ ns, name string }

// post posts e on the plan's pod through kube, bounded by 5 s; nothing
// without a client or without POD_NAME.
func (s *session) post(kube *discovery.Kube, e event) error {
	if kube == nil || s.PodName == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return postEvent(ctx, kube, podRef{s.Namespace, s.PodName}, e)
}

// postEvent posts e on pod, synchronously: the process may be about to
// exit, and client-go's event recorders deliver asynchronously from a
// queue that would have to be flushed first. The Event is written as its
// JSON fields: the agent links no typed API objects.
func postEvent(ctx context.Context, kube *discovery.Kube, pod podRef, e event) error {
	ns, typ, reason, msg := pod.ns, e.typ, e.reason, e.msg
	ref, err := kube.PodRef(ctx, ns, pod.name)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	action := "Wait"
	for _, a := range []string{"Bootstrap", "Reload"} {
		if strings.HasPrefix(reason, a) {
			action = a
		}
	}
	return kube.CreateEvent(ctx, ns, map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		"metadata":   map[string]any{"generateName": pod.name + ".", "namespace": ns},
		"involvedObject": map[string]any{
			"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod.name,
			"uid": ref.UID, "resourceVersion": ref.ResourceVersion,
		},
		"reason":             reason,
		"message":            truncate(redact.Text(msg), 1024),
		"type":               typ,
		"source":             map[string]any{"component": "kolla-agent", "host": ref.NodeName},
		"firstTimestamp":     now,
		"lastTimestamp":      now,
		"count":              int64(1),
		"reportingComponent": "kolla-agent",
		"reportingInstance":  pod.name,
		"action":             action,
	})
}
