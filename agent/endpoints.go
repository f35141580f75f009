package agent

import (
	"context"
	"errors"

	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// endpoints is `kolla-agent endpoints [--dry-run]` and the bootstrap's last
// step: make the Keystone catalog say where the service is, the public URL
// from its Service's exposure (LoadBalancer, NodePort, Route, Ingress),
// the internal and admin URLs from the Service's cluster name and port. It
// returns what it changed (or would change): nothing when the catalog is
// right already.
func (s *session) endpoints(ctx context.Context, dryRun bool) ([]bootstrap.Change, error) {
	c, err := s.catalog(!dryRun)
	if err != nil {
		return nil, err
	}
	changes, err := c.Sync(ctx, dryRun)
	if ee := (*bootstrap.EndpointError)(nil); errors.As(err, &ee) {
		return changes, configErr("%s: bootstrap.endpoints.%v", s.Source, ee)
	}
	return changes, err
}

// catalog is bootstrap.endpoints as the bootstrap package takes it, with
// the agent's API client and this replica's identity for the Lease when it
// writes.
func (s *session) catalog(writes bool) (*bootstrap.Catalog, error) {
	e := s.Config.Bootstrap.Endpoints
	if e == nil {
		return nil, configErr("%s: no bootstrap.endpoints", s.Source)
	}
	c, err := bootstrap.NewCatalog(e, s.opts.Root)
	if err != nil {
		return nil, configErr("%s: %v", s.Source, err)
	}
	kube, err := s.kubeClient()
	if err != nil {
		return nil, err
	}
	c.Namespace, c.ClusterDomain, c.Log = s.Namespace, s.templateOptions().ClusterDomain, s.log
	if kube == nil {
		return c, nil
	}
	if c.Exposures, err = s.exposureWaiter(kube); err != nil {
		return nil, err
	}
	if writes {
		if c.Identity, err = s.podIdentity(); err != nil {
			return nil, configErr("bootstrap.endpoints: %v", err)
		}
		c.Kube = kube
	}
	return c, nil
}

// newEndpointsDuty keeps the Keystone catalog on the service's public
// address while it runs (bootstrap.endpoints.public.followExposure), a
// side duty.
func (s *session) newEndpointsDuty(h *serviceHandle) *duty {
	if !s.Config.Bootstrap.FollowsExposure() || h.svc == nil {
		return nil
	}
	// Early: no catalog write once the pod is told to stop.
	return &duty{name: "endpoints", early: true, run: func(ctx context.Context) error {
		s.sideDuty(ctx, "endpoints", s.followEndpoints)
		return nil
	}}
}

// followEndpoints keeps the catalog on the public address while the
// service runs (bootstrap.FollowExposure), each change synced as
// `kolla-agent endpoints` does, with the credentials read again. It
// returns when ctx ends or on an error, for sideDuty to retry.
func (s *session) followEndpoints(ctx context.Context) error {
	kube, err := s.kubeClient()
	if err != nil || kube == nil {
		return err
	}
	ns, name := bootstrap.ServiceRef(s.Config.Bootstrap.Endpoints.Public.Service, s.Namespace)
	w, err := s.exposureWaiter(kube)
	if err != nil {
		return err
	}
	return bootstrap.FollowExposure(ctx, w, ns, name, func(ctx context.Context) error {
		_, err := s.endpoints(ctx, false)
		return err
	})
}

// exposureWaiter looks Services' exposures up (templates, the catalog),
// with the config's exposure: overrides.
func (s *session) exposureWaiter(kube *discovery.Kube) (*discovery.Waiter, error) {
	return discovery.New(discovery.Config{Kube: kube, Namespace: s.Namespace, Logger: s.log, Public: s.publicAddresses()})
}

// publicAddresses are the config's exposure: overrides in discovery's
// form, keyed namespace/name.
func (s *session) publicAddresses() map[string]discovery.Exposure {
	c := s.Config
	if len(c.Exposure) == 0 {
		return nil
	}
	m := make(map[string]discovery.Exposure, len(c.Exposure))
	for ref, x := range c.Exposure {
		ns, name := bootstrap.ServiceRef(ref, s.Namespace)
		m[ns+"/"+name] = discovery.Exposure{Host: x.Host, Port: x.Port, Scheme: x.Scheme}
	}
	return m
}
