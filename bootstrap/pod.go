package bootstrap

import (
	"context"
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kolla-agent/kolla-agent/redact"
)

// SetPodCondition sets the condition kolla.openstack.org/bootstrapped on
// the pod, through pods/status, so that a readiness gate can hold the pod
// until its bootstrap is done. One strategic-merge patch: conditions merge
// by type, so the kubelet's own are left alone. Needs patch on pods/status.
func (c *Coordinator) SetPodCondition(ctx context.Context, pod string, ok bool, reason, message string) error {
	status := "False"
	if ok {
		status = "True"
	}
	// What `kubectl describe pod` shows, to anyone who may read the pod:
	// redacted (an error can quote a URL with its password) and cut as
	// the agent's Events are.
	if message = redact.Text(message); len(message) > 1024 {
		message = message[:1021] + "..."
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": ConditionBootstrapped, "status": status, "reason": reason, "message": message,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}})
	if err != nil {
		return err
	}
	_, err = c.cfg.Kube.Resource(podsGVR, c.cfg.Namespace).Patch(ctx, pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
