package testenv

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

//go:embed crds/route.yaml
var routeCRD []byte

// RoutesGVR is OpenShift's Route, served once InstallRouteCRD has run.
var RoutesGVR = schema.GroupVersionResource{Group: "route.openshift.io", Version: "v1", Resource: "routes"}

// InstallRouteCRD makes the API server serve OpenShift Routes (a CRD with
// the fields that matter) and returns once Routes can be listed.
func (e *Env) InstallRouteCRD(ctx context.Context) error {
	var obj map[string]any
	if err := yaml.Unmarshal(routeCRD, &obj); err != nil {
		return fmt.Errorf("testenv: route CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(e.Admin())
	if err != nil {
		return err
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testenv: route CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(RoutesGVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
}
