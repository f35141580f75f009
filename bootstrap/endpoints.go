package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// EndpointURL is where one interface's URL comes from: URL as it is, or a
// Service's (NAME or NAME.NAMESPACE): its exposure for the public
// interface, its cluster DNS name and port for the others; Path follows.
type EndpointURL struct {
	Interface, URL, Service, Path string
}

// Catalog keeps one service's Keystone catalog entry on the URLs the
// cluster gives it.
type Catalog struct {
	// Service is the entry; its URLs are found by Sync.
	Service     Registration
	URLs        []EndpointURL
	Credentials Credentials
	// Namespace is the agent's: a Service named without one is there.
	Namespace     string
	ClusterDomain string
	// Exposures finds Services' addresses; nil without the API (URLs given
	// as they are only).
	Exposures *discovery.Waiter
	// Kube, with Identity (this replica), holds the catalog's Lease while
	// writing; nil: no Lease.
	Kube     *discovery.Kube
	Identity string
	Log      *slog.Logger
}

// NewCatalog is bootstrap.endpoints as a Catalog: its credentials read
// (a directory under root) and its region checked; an error is bad input.
// The caller adds the rest: the namespace, the cluster domain and the API.
func NewCatalog(e *config.Endpoints, root string) (*Catalog, error) {
	cred, err := ReadCredentials(render.UnderRoot(root, e.Credentials))
	if err != nil {
		return nil, fmt.Errorf("bootstrap.endpoints.credentials: %v", err)
	}
	if _, err := cred.RegionFor(e.Region); err != nil {
		return nil, err
	}
	c := &Catalog{
		Service:     Registration{Type: e.Type, Name: e.Name, Description: e.Description, Region: e.Region},
		Credentials: cred,
	}
	for _, f := range []struct {
		iface string
		u     *config.EndpointURL
	}{{"public", e.Public}, {"internal", e.Internal}, {"admin", e.Admin}} {
		if f.u != nil {
			c.URLs = append(c.URLs, EndpointURL{Interface: f.iface, URL: f.u.URL, Service: f.u.Service, Path: f.u.Path})
		}
	}
	return c, nil
}

// EndpointError is a URL the catalog cannot be told: a Service's without
// the API, an internal one without the cluster domain. Field is the entry's
// field under bootstrap.endpoints (internal, public.service).
type EndpointError struct {
	Field, Msg string
}

func (e *EndpointError) Error() string { return e.Field + ": " + e.Msg }

// Sync makes the catalog say where the service is and returns what it
// changed (or, dry, would change): nothing when it is right already. Two
// replicas that both find no endpoint would both create one: the writes
// are made under the Lease LeaseName(Service.Name), held only for them.
func (c *Catalog) Sync(ctx context.Context, dryRun bool) ([]Change, error) {
	reg := c.Service
	reg.URLs = map[string]string{}
	for _, u := range c.URLs {
		if u.URL != "" {
			reg.URLs[u.Interface] = u.URL
			continue
		}
		if c.Exposures == nil {
			return nil, &EndpointError{Field: u.Interface + ".service", Msg: "needs the Kubernetes API, but there is no service-account token and no --kubeconfig/KUBECONFIG"}
		}
		ns, name := ServiceRef(u.Service, c.Namespace)
		if u.Interface == "public" {
			x, err := c.Exposures.Exposure(ctx, ns, name)
			if err != nil {
				return nil, err
			}
			reg.URLs[u.Interface] = x.URL(u.Path)
			continue
		}
		if c.ClusterDomain == "" {
			return nil, &EndpointError{Field: u.Interface, Msg: "the cluster domain is unknown (CLUSTER_DOMAIN, --cluster-domain)"}
		}
		scheme, port, err := c.Exposures.ServicePort(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		x := discovery.Exposure{Scheme: scheme, Host: name + "." + ns + ".svc." + strings.TrimSuffix(c.ClusterDomain, "."), Port: port}
		reg.URLs[u.Interface] = x.URL(u.Path)
	}
	if !dryRun && c.Kube != nil {
		l := &Lease{Kube: c.Kube, Namespace: c.Namespace, Name: LeaseName(c.Service.Name), Identity: c.Identity}
		held, release, err := l.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("lease %s for the catalog: %w", l.Name, err)
		}
		defer release()
		ctx = held
	}
	changes, err := Register(ctx, c.Credentials, reg, dryRun)
	if c.Log != nil {
		for _, ch := range changes {
			c.Log.Info("keystone catalog", "change", ch.String(), "dry_run", dryRun)
		}
	}
	return changes, err
}

// FollowExposure keeps the catalog on a Service's public address while
// the service runs: it follows the Service's exposure (one watch) and calls
// sync when the address changes, e.g. a new LoadBalancer IP, and at the
// first look (after a restart of this loop a change may have been missed;
// a sync that finds the catalog right writes nothing). Every replica does
// it; the first to see a change updates the catalog, the others find it
// right. It returns when ctx ends or on sync's error, for its caller to
// start again.
func FollowExposure(ctx context.Context, w *discovery.Waiter, namespace, name string, sync func(context.Context) error) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	last := ""
	failed := make(chan error, 1)
	err := w.Follow(fctx, discovery.Dependency{Kind: discovery.KindExposed, Namespace: namespace, Name: name}, func(o discovery.Observation) {
		if o.State != discovery.Ready || o.Detail == last {
			return
		}
		last = o.Detail
		if err := sync(fctx); err != nil && fctx.Err() == nil {
			select {
			case failed <- err:
			default:
			}
			cancel()
		}
	})
	select {
	case err := <-failed:
		return err
	default:
	}
	return err
}

// ServiceRef splits NAME[.NAMESPACE], the namespace defaulting to ns.
func ServiceRef(ref, ns string) (namespace, name string) {
	name, namespace, _ = strings.Cut(ref, ".")
	if namespace == "" {
		namespace = ns
	}
	return namespace, name
}

// LeaseName names the Lease that serialises one service's catalog writes:
// kolla-catalog-<name>, made a DNS label.
func LeaseName(name string) string {
	b := []byte("kolla-catalog-" + strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return strings.TrimRight(string(b[:min(len(b), 63)]), "-")
}
