package agent

import (
	"context"
	"github.com/kolla-agent/kolla-agent/redact"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// postEvent posts one Event (type Normal or Warning) on the agent's own pod, synchronously: the
// process is about to exit, and client-go's event recorders deliver
// asynchronously from a queue that would have to be flushed first. The Event
// is written as its JSON fields: the agent links no typed API objects.
func postEvent(ctx context.Context, kube *discovery.Kube, ns, pod, typ, reason, msg string) error {
	ref, err := kube.PodRef(ctx, ns, pod)
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
		"metadata":   map[string]any{"generateName": pod + ".", "namespace": ns},
		"involvedObject": map[string]any{
			"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod,
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
		"reportingInstance":  pod,
		"action":             action,
	})
}
