package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/run"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/supervise"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes"
)

// errStopRequested ends the run group when the agent is told to stop.
var errStopRequested = errors.New("stop requested")

// service is what the steady state needs of the supervised service.
type service interface {
	Run(ctx context.Context) (int, error)
	Stop()
	Done() <-chan struct{}
	Running() <-chan struct{}
}

// steadyState runs the duties beside the service as one run group until
// the service exits or ctx ends (SIGTERM), and returns the service's exit
// code. svc is nil in sidecar mode, pids the service's process (nil if
// none). Shutdown runs in the order the duties are added:
//
//  1. readiness -> stopping (/readyz answers 503 at once; /livez stays 200)
//  2. the service: SIGTERM, its grace period, then SIGKILL
//  3. the checks
//  4. the probe server, last, so probes answer through the whole stop.
func (a *Agent) steadyState(ctx context.Context, p *Plan, svc service, pids probes.PIDSource, spawner probes.Spawner, env []string, sidecar bool) (int, error) {
	cfg := config0(p)
	means := checkMeans{pids: pids, spawner: spawner, env: env}
	if deps := dependencyChecks(cfg); len(deps) > 0 {
		dc, err := a.discoveryConfig(p, deps)
		if err != nil {
			return 0, err
		}
		if means.deps, err = discovery.New(dc); err != nil {
			return 0, configErr("%s: probes: %v", p.Source, err)
		}
	}
	specs, err := a.checkSpecs(cfg, means, sidecar)
	if err != nil {
		return 0, configErr("%s: %v", p.Source, err)
	}
	health, err := probes.New(probes.Config{Checks: specs, DrainFile: cfg.Probes.DrainFile, Logger: a.log, Registerer: a.registry})
	if err != nil {
		return 0, configErr("%s: %v", p.Source, err)
	}

	var g run.Group
	// 1. The stop request: SIGTERM, or the end of the service (its actor
	// returning interrupts this one). Either way readiness fails first.
	stop := make(chan struct{})
	var stopOnce sync.Once
	g.Add(func() error {
		select {
		case <-ctx.Done():
			a.log.Info("stopping: readiness fails from now on")
			return errStopRequested
		case <-stop:
			return nil
		}
	}, func(error) {
		health.SetGate("stopping", "the agent is stopping")
		stopOnce.Do(func() { close(stop) })
	})

	// 2. The service. Its own context never ends: the stop sequence is
	// Stop's, after readiness has been failed above.
	code := 0
	var svcErr error
	if svc != nil {
		g.Add(func() error {
			code, svcErr = svc.Run(context.WithoutCancel(ctx))
			return fmt.Errorf("service exited with %d", code)
		}, func(error) {
			svc.Stop()
			<-svc.Done()
		})
	}

	// 3. The checks, once the service has started (an exec check goes
	// through the service's reaper).
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	g.Add(func() error {
		if svc != nil {
			select {
			case <-svc.Running():
			case <-svc.Done():
			case <-hctx.Done():
				return nil
			}
		}
		health.Run(hctx)
		return nil
	}, func(error) { hcancel() })

	// 4. The probe server, stopped last: the TCP listener and the Unix
	// socket as two duties, so that one that cannot open (a read-only
	// /run) does not take the other down.
	for _, l := range []struct{ duty, addr, sock string }{
		{"probe-server", probeAddress(cfg), ""},
		{"probe-socket", "", probeSocket(cfg)},
	} {
		if l.addr == "" && l.sock == "" {
			continue
		}
		sctx, scancel := context.WithCancel(context.Background())
		g.Add(func() error {
			a.sideDuty(sctx, l.duty, health, func(ctx context.Context) error {
				return a.serveProbes(ctx, l.addr, l.sock, health)
			})
			return nil
		}, func(error) { scancel() })
	}

	start := time.Now()
	err = g.Run()
	a.log.Debug("steady state ended", "cause", err.Error(), "after", time.Since(start).Round(time.Millisecond).String())
	return code, svcErr
}

// serveProbes serves until ctx ends; an error before that (the address is
// taken) is the duty's failure.
func (a *Agent) serveProbes(ctx context.Context, addr, sock string, health *probes.Health) error {
	srv, err := probes.NewServer(probes.ServerConfig{Address: addr, Socket: sock, Health: health, Gatherer: a.registry, Logger: a.log})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		case <-done:
		}
	}()
	return srv.Serve()
}

// sideDuty runs a duty that must never take the service down: when it fails
// it is logged, counted, shown in ?verbose, and started again with backoff
// until ctx ends.
func (a *Agent) sideDuty(ctx context.Context, name string, health *probes.Health, fn func(context.Context) error) {
	b := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 30 * time.Second}
	for {
		err := fn(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped by itself")
		}
		a.metrics.dutyFailures.WithLabelValues(name).Inc()
		delay := b.Step()
		a.log.Warn("agent duty failed; the service is not affected; retrying", "duty", name, "error", err.Error(), "retry_in", delay.Round(time.Millisecond).String())
		health.SetDegraded(name, err.Error())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		health.SetDegraded(name, "")
	}
}

// probeAddress and probeSocket: the configured listeners, defaulted when
// there are checks, "" when off.
func probeAddress(cfg *config.Config) string {
	return listener(cfg.Probes.Address, config.DefaultProbeAddress, cfg)
}

func probeSocket(cfg *config.Config) string {
	return listener(cfg.Probes.Socket, config.DefaultProbeSocket, cfg)
}

func listener(v, def string, cfg *config.Config) string {
	switch {
	case v == "off":
		return ""
	case v != "":
		return v
	case len(cfg.Probes.Checks) > 0:
		return def
	}
	return ""
}

var _ service = (*supervise.Supervisor)(nil)
