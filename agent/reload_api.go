package agent

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kolla-agent/kolla-agent/agent/reload"
	"github.com/kolla-agent/kolla-agent/discovery"
)

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// newAPISource is reload.source: api over the agent's API client, for its
// own pod and namespace.
func (s *session) newAPISource(ctx context.Context, dirs []string, stateDir string) (*reload.APISource, error) {
	kube, err := s.kubeClient()
	switch {
	case err != nil:
		return nil, err
	case kube == nil:
		return nil, errors.New("reload.source api needs the Kubernetes API (no service-account token, no --kubeconfig)")
	case s.PodName == "":
		return nil, errors.New("reload.source api needs the pod's name (POD_NAME), to find its ConfigMap volumes")
	}
	return reload.NewAPISource(ctx, configMapAPI{kube: kube, ns: s.Namespace, pod: s.PodName}, dirs, s.path, stateDir, s.log)
}

// configMapAPI is reload.ConfigMapAPI on the agent's client.
type configMapAPI struct {
	kube    *discovery.Kube
	ns, pod string
}

func (c configMapAPI) Pod(ctx context.Context) (*unstructured.Unstructured, error) {
	u, err := c.kube.Resource(podsGVR, c.ns).Get(ctx, c.pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", c.ns, c.pod, err)
	}
	return u, nil
}

// ConfigMap is one narrowed watch, followed for the pod's life.
func (c configMapAPI) ConfigMap(ctx context.Context, name string, onErr func(op string, err error)) <-chan []*unstructured.Unstructured {
	obs := c.kube.Observe(ctx, configMapsGVR, c.ns, discovery.Selector{Name: name}, onErr)
	obs.Follow()
	return obs.C
}
