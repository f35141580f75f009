package discovery

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// followKey marks a context whose check keeps watching after "ready": the
// steady-state form of a dependency (a probe), not a wait.
type followKey struct{}

func following(ctx context.Context) bool {
	f, _ := ctx.Value(followKey{}).(bool)
	return f
}

// step clears the mark for an intermediate step of a check (a DaemonSet's
// generation, a resource's API discovery), which must still end when ready.
func step(ctx context.Context) context.Context {
	return context.WithValue(ctx, followKey{}, false)
}

// Follow keeps looking at an API-object dependency and reports every change
// of its state until ctx ends: one narrowed list+watch, resumed on errors,
// never a poll. It returns ctx's error, or the error that ended the watch
// (the caller starts it again). Only for kinds that need the API.
func (w *Waiter) Follow(ctx context.Context, d Dependency, report func(Observation)) error {
	if !d.Kind.NeedsAPI() {
		return fmt.Errorf("discovery: %s: Follow is for API objects; use Look", d)
	}
	return w.check(context.WithValue(ctx, followKey{}, true), d, report, nil)
}

// Look looks at a local dependency once (DNS, TCP, HTTP, file, socket), for
// a probe that asks on its own schedule.
func (w *Waiter) Look(ctx context.Context, d Dependency) Observation {
	switch d.Kind {
	case KindDNS:
		return w.cfg.DNS.check(ctx, d.Name)
	case KindTCP:
		return checkTCP(ctx, d.Address)
	case KindFile:
		return checkFile(d.Path)
	case KindSocket:
		return checkSocket(ctx, d.Path)
	case KindHTTP:
		return lookHTTP(ctx, d)
	}
	return failed("%s: not a local dependency; use Follow", d)
}

// lookHTTP is one GET, no retries: the probe's period is the retry.
func lookHTTP(ctx context.Context, d Dependency) Observation {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL, nil)
	if err != nil {
		return failed("%v", err)
	}
	c := &http.Client{
		Timeout:       attemptTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{DisableKeepAlives: true, TLSHandshakeTimeout: attemptTimeout, ResponseHeaderTimeout: attemptTimeout, IdleConnTimeout: time.Second},
	}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return httpObservation(d, resp, err)
}
