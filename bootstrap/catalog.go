package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/endpoints"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/regions"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/services"
)

// The Keystone catalog is kept through gophercloud's identity v3: it
// authenticates every way operators configure (password by names or IDs,
// application credentials, token; project, domain or system scope), finds
// the identity endpoint in the token's catalog, and pages lists.

// identityClient authenticates with c and returns the identity v3 client
// the catalog calls go through.
func identityClient(ctx context.Context, c Credentials) (*gophercloud.ServiceClient, error) {
	provider, err := openstack.NewClient(c.Auth.IdentityEndpoint)
	if err != nil {
		return nil, fmt.Errorf("keystone %s: %w", c.Auth.IdentityEndpoint, err)
	}
	provider.HTTPClient = keystoneHTTP(c.TLS)
	provider.UserAgent.Prepend("kolla-agent")
	if err := openstack.Authenticate(ctx, provider, c.Auth); err != nil {
		return nil, fmt.Errorf("keystone %s: authenticating %s (credentials from %s): %w", c.Auth.IdentityEndpoint, who(c.Auth), c.From, err)
	}
	eo := gophercloud.EndpointOpts{}
	if c.Interface != "" {
		eo = gophercloud.EndpointOpts{Region: c.Region, Availability: gophercloud.Availability(c.Interface)}
	}
	id, err := openstack.NewIdentityV3(provider, eo)
	if err != nil {
		return nil, fmt.Errorf("keystone %s: the %s identity endpoint of region %s in the token's catalog (OS_INTERFACE, OS_REGION_NAME): %w", c.Auth.IdentityEndpoint, c.Interface, c.Region, err)
	}
	return id, nil
}

// keystoneHTTP is the client for Keystone: its own CA when given, and
// redirects followed only on the same host without a downgrade to http,
// since every request carries a password, a secret or a token and Go
// forwards X-Auth-Token (and a 307's body) to wherever a redirect points.
func keystoneHTTP(cfg *tls.Config) http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if cfg != nil {
		t.TLSClientConfig = cfg
	}
	return http.Client{
		Timeout:   30 * time.Second,
		Transport: t,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			from := via[len(via)-1].URL
			if req.URL.Host != from.Host || (from.Scheme == "https" && req.URL.Scheme != "https") {
				return fmt.Errorf("keystone redirected %s to %s: not followed, the request carries credentials (set OS_AUTH_URL to where Keystone is)", from.Redacted(), req.URL.Redacted())
			}
			if len(via) >= 5 {
				return errors.New("keystone: more than 5 redirects")
			}
			return nil
		},
	}
}

func who(a gophercloud.AuthOptions) string {
	switch {
	case a.ApplicationCredentialID != "":
		return "application credential " + a.ApplicationCredentialID
	case a.ApplicationCredentialName != "":
		return "application credential " + a.ApplicationCredentialName
	case a.TokenID != "":
		return "with a token"
	case a.UserID != "":
		return "user ID " + a.UserID
	}
	return "user " + a.Username
}

// denied explains a 403 on the catalog: Keystone's defaults from Wallaby
// to Yoga, and clouds that keep them in policy.yaml, give the catalog to
// system-scoped admins only (role:admin and system_scope:all).
func denied(err error, c Credentials) error {
	if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		return err
	}
	if s := c.Auth.Scope; s != nil && s.System {
		return fmt.Errorf("%w (the token is system-scoped: the user lacks the admin role on the system)", err)
	}
	return fmt.Errorf("%w (Keystone's policy wants a system-scoped token for the catalog: give the credentials OS_SYSTEM_SCOPE=all instead of a project, with a user that has the admin role on the system)", err)
}

// Registration is what the catalog must say for one service.
type Registration struct {
	Type, Name, Description string
	Region                  string            // "" for none
	URLs                    map[string]string // interface (public, internal, admin) -> URL
}

// Change is one write Register made (or would make, in a dry run).
type Change struct {
	What, Before, After string
}

func (c Change) String() string {
	if c.Before == "" {
		return fmt.Sprintf("create %s: %s", c.What, c.After)
	}
	return fmt.Sprintf("update %s: %s -> %s", c.What, c.Before, c.After)
}

// Register makes the catalog say r: the service (by type and name), the
// region, and one endpoint per interface with its URL, created or updated,
// never duplicated. It returns what it changed; a second run returns
// nothing. dryRun reads and changes nothing.
//
// The region is r.Region, else the credentials' OS_REGION_NAME (the two
// must agree when both are set), else the catalog's only region; with
// several and none configured it refuses rather than write into a region
// it guessed.
func Register(ctx context.Context, cred Credentials, r Registration, dryRun bool) ([]Change, error) {
	k, err := identityClient(ctx, cred)
	if err != nil {
		return nil, err
	}
	var changes []Change
	pages, err := services.List(k, services.ListOpts{ServiceType: r.Type}).AllPages(ctx)
	if err != nil {
		return nil, denied(err, cred)
	}
	svcs, err := services.ExtractServices(pages)
	if err != nil {
		return nil, err
	}
	var svc *services.Service
	for i, s := range svcs {
		if s.Name == r.Name {
			svc = &svcs[i]
		}
	}
	region, err := pickRegion(ctx, k, cred, r.Region)
	if err != nil {
		return nil, err
	}
	if svc == nil {
		changes = append(changes, Change{What: "service " + r.Name + " (" + r.Type + ")", After: r.Name})
		if dryRun {
			svc = &services.Service{}
		} else {
			enabled := true
			svc, err = services.Create(ctx, k, services.CreateOpts{Type: r.Type, Name: r.Name, Description: r.Description, Enabled: &enabled}).Extract()
			if err != nil {
				return changes, denied(err, cred)
			}
		}
	}
	if region.create {
		changes = append(changes, Change{What: "region", After: region.id})
		if !dryRun {
			if _, err := regions.Create(ctx, k, regions.CreateOpts{ID: region.id}).Extract(); err != nil {
				return changes, denied(err, cred)
			}
		}
	}
	var eps []endpoints.Endpoint
	if svc.ID != "" {
		pages, err := endpoints.List(k, endpoints.ListOpts{ServiceID: svc.ID}).AllPages(ctx)
		if err != nil {
			return changes, denied(err, cred)
		}
		if eps, err = endpoints.ExtractEndpoints(pages); err != nil {
			return changes, err
		}
	}
	for _, iface := range []string{"public", "internal", "admin"} {
		want, ok := r.URLs[iface]
		if !ok {
			continue
		}
		what := fmt.Sprintf("%s endpoint of %s", iface, r.Name)
		if region.id != "" {
			what += " in " + region.id
		}
		var have *endpoints.Endpoint
		for i, e := range eps {
			if string(e.Availability) == iface && (region.id == "" || e.RegionID == region.id) {
				have = &eps[i]
				break // the first: a duplicate someone else made is left alone
			}
		}
		switch {
		case have == nil:
			changes = append(changes, Change{What: what, After: want})
			if dryRun {
				continue
			}
			enabled := true
			if _, err := endpoints.Create(ctx, k, endpoints.CreateOpts{Availability: gophercloud.Availability(iface),
				URL: want, ServiceID: svc.ID, Region: region.id, Enabled: &enabled}).Extract(); err != nil {
				return changes, denied(err, cred)
			}
		case have.URL != want:
			changes = append(changes, Change{What: what, Before: have.URL, After: want})
			if dryRun {
				continue
			}
			if _, err := endpoints.Update(ctx, k, have.ID, endpoints.UpdateOpts{URL: want}).Extract(); err != nil {
				return changes, denied(err, cred)
			}
		}
	}
	return changes, nil
}

// RegionFor is the region to register in when agent.yaml says configured:
// that, or the credentials' OS_REGION_NAME; both set and different is an
// error, since one region's catalog would be written with the other's.
func (c Credentials) RegionFor(configured string) (string, error) {
	if configured != "" && c.Region != "" && configured != c.Region {
		return "", fmt.Errorf("bootstrap.endpoints.region is %s but the credentials (%s) say OS_REGION_NAME=%s: make them agree", configured, c.From, c.Region)
	}
	if configured != "" {
		return configured, nil
	}
	return c.Region, nil
}

type regionChoice struct {
	id     string // "" for endpoints without a region
	create bool
}

// pickRegion decides the region the endpoints go in (see Register).
func pickRegion(ctx context.Context, k *gophercloud.ServiceClient, cred Credentials, configured string) (regionChoice, error) {
	want, err := cred.RegionFor(configured)
	if err != nil {
		return regionChoice{}, err
	}
	pages, err := regions.List(k, nil).AllPages(ctx)
	if err != nil {
		return regionChoice{}, denied(err, cred)
	}
	all, err := regions.ExtractRegions(pages)
	if err != nil {
		return regionChoice{}, err
	}
	ids := make([]string, len(all))
	for i, rg := range all {
		ids[i] = rg.ID
	}
	slices.Sort(ids)
	switch {
	case want != "":
		return regionChoice{id: want, create: !slices.Contains(ids, want)}, nil
	case len(ids) == 1:
		return regionChoice{id: ids[0]}, nil
	case len(ids) > 1:
		return regionChoice{}, fmt.Errorf("keystone's catalog has the regions %s and neither bootstrap.endpoints.region nor OS_REGION_NAME (%s) says which: not guessing", strings.Join(ids, ", "), cred.From)
	}
	return regionChoice{}, nil
}
