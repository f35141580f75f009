package bootstrap

import (
	"context"
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
