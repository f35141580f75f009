package discovery

import (
	"context"
	"sort"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// waitService: the Service has at least one ready endpoint, read from its
// EndpointSlices (ready nil or true counts, as the cluster DNS spec does).
// Where EndpointSlices are not served or not permitted, it falls back to the
// Endpoints object of the same name.
func (w *Waiter) waitService(ctx context.Context, d Dependency, report func(Observation)) error {
	ns := w.namespace(d)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fallback, listed atomic.Bool
	lw := newListWatch(w.cfg.Kube.in(endpointSlicesGVR, ns),
		selector{label: "kubernetes.io/service-name=" + d.Name},
		func(op string, err error) {
			// Only the first list decides: once slices were listed, a 403 or
			// 404 is an API server still starting (its authorizer or its
			// discovery not ready yet), to be retried.
			if !listed.Load() && (apierrors.IsNotFound(err) || apierrors.IsForbidden(err)) {
				w.log.Info("EndpointSlices unavailable; falling back to Endpoints", "dependency", d.String(), "error", err.Error())
				fallback.Store(true)
				cancel()
				return
			}
			apiTrouble(report)(op, err)
		})
	err := w.watchUntil(sctx, d, report, lw, func(objs []any) Observation {
		listed.Store(true)
		return slicesObservation(objs)
	})
	if !fallback.Load() || ctx.Err() != nil {
		return err
	}
	lw = newListWatch(w.cfg.Kube.in(endpointsGVR, ns), byName(d.Name), apiTrouble(report))
	return w.watchUntil(ctx, d, report, lw, endpointsObservation)
}

func slicesObservation(objs []any) Observation {
	if len(objs) == 0 {
		return waiting("no EndpointSlices (no Service, or no selector)")
	}
	var addrs []string
	total := 0
	for _, s := range decodeAll[endpointSlice](objs) {
		for _, ep := range s.Endpoints {
			total++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				addrs = append(addrs, ep.Addresses...)
			}
		}
	}
	return endpointCount(addrs, total)
}

func endpointsObservation(objs []any) Observation {
	if len(objs) == 0 {
		return waiting("no Endpoints object")
	}
	var addrs []string
	total := 0
	for _, e := range decodeAll[endpoints](objs) {
		for _, s := range e.Subsets {
			total += len(s.Addresses) + len(s.NotReadyAddresses)
			for _, a := range s.Addresses {
				addrs = append(addrs, a.IP)
			}
		}
	}
	return endpointCount(addrs, total)
}

func endpointCount(readyAddrs []string, total int) Observation {
	if len(readyAddrs) == 0 {
		return waiting("0 of %d endpoints ready", total)
	}
	sort.Strings(readyAddrs)
	return ready("%d of %d endpoints ready: %s", len(readyAddrs), total, strings.Join(first(readyAddrs, 5), ", "))
}
