package agent

import (
	"context"
	"fmt"
	"strings"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// Endpoints is `kolla-agent endpoints [--dry-run]` and the bootstrap's last
// step: make the Keystone catalog say where the service is, the public URL
// from its Service's exposure (LoadBalancer, NodePort, Route, Ingress),
// the internal and admin URLs from the Service's cluster name and port. It
// returns what it changed (or would change): nothing when the catalog is
// right already.
func (a *Agent) Endpoints(ctx context.Context, p *Plan, dryRun bool) ([]bootstrap.Change, error) {
	e := p.Config.Bootstrap.Endpoints
	if e == nil {
		return nil, configErr("%s: no bootstrap.endpoints", p.Source)
	}
	cred, err := bootstrap.ReadCredentials(a.path(e.Credentials))
	if err != nil {
		return nil, configErr("%s: bootstrap.endpoints.credentials: %v", p.Source, err)
	}
	if _, err := cred.RegionFor(e.Region); err != nil {
		return nil, configErr("%s: %v", p.Source, err)
	}
	kube, err := a.kubeClient()
	if err != nil {
		return nil, err
	}
	var w *discovery.Waiter
	if kube != nil {
		if w, err = a.exposureWaiter(p, kube); err != nil {
			return nil, err
		}
	}
	domain := a.templateOptions(p).ClusterDomain
	reg := bootstrap.Registration{Type: e.Type, Name: e.Name, Description: e.Description, Region: e.Region, URLs: map[string]string{}}
	for _, f := range []struct {
		iface  string
		u      *config.EndpointURL
		public bool
	}{{"public", e.Public, true}, {"internal", e.Internal, false}, {"admin", e.Admin, false}} {
		if f.u == nil {
			continue
		}
		field := "bootstrap.endpoints." + f.iface
		if f.u.URL != "" {
			reg.URLs[f.iface] = f.u.URL
			continue
		}
		if w == nil {
			return nil, configErr("%s: %s.service needs the Kubernetes API, but there is no service-account token and no --kubeconfig/KUBECONFIG", p.Source, field)
		}
		ns, name := serviceRef(f.u.Service, p.Namespace)
		if f.public {
			x, err := w.Exposure(ctx, ns, name)
			if err != nil {
				return nil, err
			}
			reg.URLs[f.iface] = x.URL(f.u.Path)
			continue
		}
		if domain == "" {
			return nil, configErr("%s: %s: the cluster domain is unknown (CLUSTER_DOMAIN, --cluster-domain)", p.Source, field)
		}
		scheme, port, err := w.ServicePort(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		x := discovery.Exposure{Scheme: scheme, Host: name + "." + ns + ".svc." + strings.TrimSuffix(domain, "."), Port: port}
		reg.URLs[f.iface] = x.URL(f.u.Path)
	}
	if !dryRun && kube != nil {
		// One replica at a time: two that both find no endpoint would
		// both create one. The Lease is held only for the few calls.
		pod, err := podIdentity(p)
		if err != nil {
			return nil, configErr("bootstrap.endpoints: %v", err)
		}
		l := &bootstrap.Lease{Kube: kube, Namespace: p.Namespace, Name: catalogLease(e.Name), Identity: pod}
		held, release, err := l.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("lease %s for the catalog: %w", l.Name, err)
		}
		defer release()
		ctx = held
	}
	changes, err := bootstrap.Register(ctx, cred, reg, dryRun)
	for _, c := range changes {
		a.log.Info("keystone catalog", "change", c.String(), "dry_run", dryRun)
	}
	return changes, err
}

// followEndpoints keeps the catalog on the public address while the
// service runs: it follows the Service's exposure (one watch) and registers
// again when the address changes, e.g. a new LoadBalancer IP. Every replica
// does it; the first to see a change updates the catalog, the others find
// it right (Register is idempotent). It returns when ctx ends or on an
// error, for sideDuty to retry.
func (a *Agent) followEndpoints(ctx context.Context, p *Plan) error {
	e := p.Config.Bootstrap.Endpoints
	kube, err := a.kubeClient()
	if err != nil || kube == nil {
		return err
	}
	ns, name := serviceRef(e.Public.Service, p.Namespace)
	w, err := a.exposureWaiter(p, kube)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	last := ""
	failed := make(chan error, 1)
	err = w.Follow(fctx, discovery.Dependency{Kind: discovery.KindExposed, Namespace: ns, Name: name}, func(o discovery.Observation) {
		if o.State != discovery.Ready || o.Detail == last {
			return
		}
		last = o.Detail
		// The first look too: after a restart of this duty a change may
		// have been missed (a look that finds the catalog right writes
		// nothing).
		if _, err := a.Endpoints(fctx, p, false); err != nil && fctx.Err() == nil {
			select {
			case failed <- err:
			default:
			}
			cancel() // sideDuty reports it and starts again
		}
	})
	select {
	case err := <-failed:
		return err
	default:
	}
	return err
}

// exposureWaiter looks Services' exposures up (templates, the catalog),
// with the config's exposure: overrides.
func (a *Agent) exposureWaiter(p *Plan, kube *discovery.Kube) (*discovery.Waiter, error) {
	return discovery.New(discovery.Config{Kube: kube, Namespace: p.Namespace, Logger: a.log, Public: publicAddresses(p)})
}

// publicAddresses are the config's exposure: overrides in discovery's
// form, keyed namespace/name.
func publicAddresses(p *Plan) map[string]discovery.Exposure {
	c := p.Config
	if len(c.Exposure) == 0 {
		return nil
	}
	m := make(map[string]discovery.Exposure, len(c.Exposure))
	for ref, x := range c.Exposure {
		ns, name := serviceRef(ref, p.Namespace)
		m[ns+"/"+name] = discovery.Exposure{Host: x.Host, Port: x.Port, Scheme: x.Scheme}
	}
	return m
}

// serviceRef splits NAME[.NAMESPACE], the namespace defaulting to ns.
func serviceRef(ref, ns string) (namespace, name string) {
	name, namespace, _ = strings.Cut(ref, ".")
	if namespace == "" {
		namespace = ns
	}
	return namespace, name
}

// catalogLease names the Lease that serialises one service's catalog
// writes: kolla-catalog-<name>, made a DNS label.
func catalogLease(name string) string {
	b := []byte("kolla-catalog-" + strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return strings.TrimRight(string(b[:min(len(b), 63)]), "-")
}
