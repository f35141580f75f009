// Package slice puts examples/ on a real node as `kubectl apply -k
// examples/` would, with only the images swapped for the ones
// internal/image builds here: the end-to-end tests and `make demo-cluster`
// share it.
package slice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/kolla-agent/kolla-agent/internal/image"
)

// Namespace is the examples' own: their templates name it.
const Namespace = "openstack"

// kollaImage matches the examples' kolla images; the name maps to the
// image internal/image builds (mariadb-server -> localhost/kolla-mariadb).
var kollaImage = regexp.MustCompile(`quay\.io/openstack\.kolla/([a-z-]+):[A-Za-z0-9._-]+`)

// agentImage is the agent's published image, as the examples name it.
const agentImage = "ghcr.io/kolla-agent/kolla-agent:latest"

// Build builds repo/examples with kustomize and keeps the objects of the
// named services (the names they have or start with, a Job only by its own
// name) and the shared namespace, Secrets and RBAC, with the images
// swapped in pod specs and in the Job templates the ConfigMaps carry alike.
func Build(repo string, services ...string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repo, "examples"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build examples/: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = bytes.ReplaceAll(b, []byte(agentImage), []byte(image.AgentRef))
		b = kollaImage.ReplaceAllFunc(b, func(m []byte) []byte {
			name := strings.TrimSuffix(string(kollaImage.FindSubmatch(m)[1]), "-server")
			return []byte("localhost/kolla-" + name + ":dev")
		})
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			return nil, err
		}
		if in(o, services) {
			out = append(out, o)
		}
	}
	return out, nil
}

func in(o *unstructured.Unstructured, services []string) bool {
	switch o.GetKind() {
	case "Namespace", "Secret", "ServiceAccount", "Role", "RoleBinding":
		return true
	case "Job":
		return slices.Contains(services, o.GetName())
	}
	name := o.GetName()
	for _, s := range services {
		if name == s || strings.HasPrefix(name, s+"-") {
			return true
		}
	}
	return false
}

// Apply creates or updates each object by server-side apply, as `kubectl
// apply --server-side` does, retrying a while what the API refuses for
// now (a namespace's default ServiceAccount comes a moment after it).
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	force := true
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		b, err := json.Marshal(o)
		if err != nil {
			return err
		}
		var last error
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, last = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{FieldManager: "kolla-agent-slice", Force: &force})
			if apierrors.IsForbidden(last) || apierrors.IsNotFound(last) {
				return false, nil
			}
			return last == nil, last
		})
		if err != nil {
			return fmt.Errorf("apply %s %s: %w (last: %v)", gvk.Kind, o.GetName(), err, last)
		}
	}
	return nil
}

// Receiver describes the Fluent forward receiver that takes fluent-bit's
// place in keystone's pods: its image, and the volume it writes the
// entries it acks to (as <pod name>.jsonl).
type Receiver struct {
	Image  string
	Volume map[string]any // a pod volume source, e.g. {"emptyDir": {}}
}

// ReplaceFluentBit puts r where deploy's fluent-bit native sidecar is (same
// name, same place among the init containers, restartPolicy Always),
// listening where the agent's logs.sink points (24224).
func ReplaceFluentBit(deploy *unstructured.Unstructured, r Receiver) error {
	inits, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "initContainers")
	found := false
	for _, c := range inits {
		m := c.(map[string]any)
		if m["name"] != "fluent-bit" {
			continue
		}
		found = true
		probe := func(period int64) map[string]any {
			return map[string]any{"tcpSocket": map[string]any{"port": int64(24224)}, "periodSeconds": period, "failureThreshold": int64(30)}
		}
		m["image"], m["imagePullPolicy"] = r.Image, "Never"
		m["args"] = []any{`{"module": "/srv/node_modules/@fluent-org/logger", "host": "0.0.0.0", "port": 24224, "output": "/out/$(POD_NAME).jsonl"}`}
		m["env"] = []any{map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}}}
		m["ports"] = []any{map[string]any{"name": "forward", "containerPort": int64(24224)}}
		m["startupProbe"], m["livenessProbe"] = probe(1), probe(30)
		m["volumeMounts"] = []any{map[string]any{"name": "received", "mountPath": "/out"}}
	}
	if !found {
		return fmt.Errorf("%s %s has no fluent-bit sidecar", deploy.GetKind(), deploy.GetName())
	}
	if err := unstructured.SetNestedSlice(deploy.Object, inits, "spec", "template", "spec", "initContainers"); err != nil {
		return err
	}
	vols, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "volumes")
	vol := map[string]any{"name": "received"}
	for k, v := range r.Volume {
		vol[k] = v
	}
	vols = append(vols, vol)
	return unstructured.SetNestedSlice(deploy.Object, vols, "spec", "template", "spec", "volumes")
}
