package bootstrap

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestLeaseNameAndServiceRef(t *testing.T) {
	for in, want := range map[string]string{
		"glance":                      "kolla-catalog-glance",
		"Nova_API":                    "kolla-catalog-nova-api",
		strings.Repeat("x", 80):       "kolla-catalog-" + strings.Repeat("x", 49),
		"a" + strings.Repeat("-", 60): "kolla-catalog-a",
	} {
		if got := LeaseName(in); got != want {
			t.Errorf("LeaseName(%q) = %q, want %q", in, got, want)
		}
	}
	if ns, name := ServiceRef("glance-api", "openstack"); ns != "openstack" || name != "glance-api" {
		t.Errorf("ServiceRef without a namespace: %s/%s", ns, name)
	}
	if ns, name := ServiceRef("keystone.identity", "openstack"); ns != "identity" || name != "keystone" {
		t.Errorf("ServiceRef with one: %s/%s", ns, name)
	}
}

// A URL that needs the API, without it, or the cluster domain, without
// it, is an EndpointError naming the interface, before anything is asked
// of Keystone.
func TestCatalogEndpointErrors(t *testing.T) {
	c := &Catalog{Service: Registration{Type: "image", Name: "glance"}, Namespace: "openstack",
		URLs: []EndpointURL{{Interface: "public", URL: "https://glance.example"}, {Interface: "internal", Service: "glance-api", Path: "/"}}}
	_, err := c.Sync(context.Background(), true)
	var ee *EndpointError
	if !errors.As(err, &ee) || ee.Error() != "internal.service: needs the Kubernetes API, but there is no service-account token and no --kubeconfig/KUBECONFIG" {
		t.Errorf("without the API: %v", err)
	}
}
