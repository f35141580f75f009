package discovery

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Where listing EndpointSlices is forbidden (a Role written for Endpoints),
// the service check falls back to the Endpoints object. A pure unit test:
// the real RBAC example grants EndpointSlices, so only a fake can refuse them.
func TestServiceFallsBackToEndpoints(t *testing.T) {
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "mariadb", Namespace: "openstack"},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.9"}}}},
	}
	c := fake.NewClientset(ep)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "", nil)
	c.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden
	})
	c.PrependWatchReactor("endpointslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, forbidden
	})
	// The fake sends no watch-list bookmark; use plain LIST+WATCH.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	d := mustParse(t, "service:openstack/mariadb")
	w, err := New(Config{
		Dependencies: []Dependency{d},
		Timeout:      10 * time.Second,
		Kube:         &Kube{Core: c.CoreV1(), Slices: c.DiscoveryV1()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r := w.Results()[0]; r.State != Ready || !strings.Contains(r.Detail, "10.0.0.9") {
		t.Errorf("result %+v", r)
	}
}
