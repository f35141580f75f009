package discovery

import (
	"context"
	"errors"
	"sort"
	"strings"
)

// waitService: the Service has at least one ready endpoint, read from its
// EndpointSlices (ready nil or true counts, as the cluster DNS spec does).
// Where EndpointSlices are not served or not permitted, it falls back to the
// Endpoints object of the same name. sh, when not nil, is the wait's shared
// EndpointSlice watch of the namespace, which the Service joins.
func (w *Waiter) waitService(ctx context.Context, d Dependency, report func(Observation), sh *shared) error {
	last := lastSeen{report: report}
	eval := func(objs []any) (bool, error) { return last.settle(ctx, d, slicesObservation(objs)) }
	var err error
	if sh != nil {
		err = sh.join(ctx, d.Name, eval, apiTrouble(report), last.waiting)
	} else {
		err = w.waitSlices(ctx, d, report, eval)
	}
	if !errors.Is(err, errOwnWatch) || ctx.Err() != nil {
		return err
	}
	w.log.Info("EndpointSlices unavailable; falling back to Endpoints", "dependency", d.String())
	lw := newListWatch(w.cfg.Kube.in(endpointsGVR, w.namespace(d)), byName(d.Name), apiTrouble(report))
	return w.watchUntil(ctx, d, report, lw, endpointsObservation)
}

// waitSlices is one Service's own EndpointSlice watch (a followed one),
// ending with errOwnWatch where EndpointSlices cannot be read.
func (w *Waiter) waitSlices(ctx context.Context, d Dependency, report func(Observation), eval func([]any) (bool, error)) error {
	sh := newShared(ctx, w.cfg.Kube.in(endpointSlicesGVR, w.namespace(d)), endpointSlicesKind, w.sleep)
	sh.plan(d.Name)
	return sh.join(ctx, d.Name, eval, apiTrouble(report), nil)
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
