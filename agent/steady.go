package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/run"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/supervise"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes"
	"github.com/kolla-agent/kolla-agent/retry"
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
// none), argv its command line (nil in sidecar mode). Shutdown runs in the order the duties are added:
//
//  1. readiness -> stopping (/readyz answers 503 at once; /livez stays 200)
//  2. the reload, which could act on the service
//  3. the service: SIGTERM, its grace period, then SIGKILL
//  4. the log shipping, which drains what the service wrote last
//  5. the checks, the bootstrap's later phases, the catalog
//  6. the probe server, last, so probes answer through the whole stop.
func (a *Agent) steadyState(ctx context.Context, p *Plan, pr *probeRun, svc service, pids probes.PIDSource, spawner probes.Spawner, env, argv []string, rr *reloadRun) (int, error) {
	sidecar := svc == nil
	cfg := p.Config
	means := checkMeans{pids: pids, spawner: spawner, env: env, argv: argv}
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
	lr, err := a.newLogs(p)
	if err != nil {
		return 0, err
	}
	if pr == nil {
		pr = a.startProbes(p)
	}
	a.health.Store(health) // from now on the probe server answers with the service's checks

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

	// 2. The reload, which acts on the service: stopped before it is.
	if rr != nil {
		rctx, rcancel := context.WithCancel(ctx)
		g.Add(func() error {
			if svc != nil {
				select {
				case <-svc.Running():
				case <-svc.Done():
					<-rctx.Done()
					return nil
				case <-rctx.Done():
					return nil
				}
			}
			a.sideDuty(rctx, "reload", func(ctx context.Context) error { return rr.run(ctx, health, means) })
			return nil
		}, func(error) { rcancel() })
	}

	// 3. The service. Its own context never ends: the stop sequence is
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

	// 4. Log shipping, from the start (the lines of the wait and the
	// bootstrap too) until after the service has stopped: its interrupt
	// comes after the service's, and drains what the service wrote last
	// before the probe server goes.
	if lr != nil {
		lctx, lcancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		g.Add(func() error {
			defer close(done)
			a.sideDuty(lctx, "logs", lr.run)
			lr.close()
			return nil
		}, func(error) {
			lcancel()
			<-done
		})
	}

	// 5. The checks, once the service has started (an exec check goes
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

	// 6. The phases of the bootstrap that wait for the rollout (contract).
	if a.boot != nil && len(a.boot.steps(true)) > 0 {
		rctx, rcancel := context.WithCancel(ctx)
		g.Add(func() error {
			a.afterRollout(rctx, p)
			<-rctx.Done() // done: the service runs on
			return nil
		}, func(error) { rcancel() })
	}

	// 7. The Keystone catalog follows the public address.
	if cfg.Bootstrap.FollowsExposure() && svc != nil {
		ectx, ecancel := context.WithCancel(ctx)
		g.Add(func() error {
			a.sideDuty(ectx, "endpoints", func(ctx context.Context) error { return a.followEndpoints(ctx, p) })
			return nil
		}, func(error) { ecancel() })
	}

	// 8. The probe server, already serving (startProbes), stopped last:
	// run.Group calls the interrupts in this order, and the service's
	// returns only once the service is gone. (With no listener configured
	// pr has nothing to wait for: this actor still waits for the stop.)
	pctx, pcancel := context.WithCancel(context.Background())
	g.Add(func() error {
		<-pctx.Done()
		pr.stop()
		return nil
	}, func(error) { pcancel() })

	start := time.Now()
	err = g.Run()
	a.log.Debug("steady state ended", "cause", fmt.Sprint(err), "after", time.Since(start).Round(time.Millisecond).String())
	return code, svcErr
}

// probeRun is the probe server's duties: the TCP listener and the Unix
// socket, each a side duty, so that one that cannot open (a read-only /run)
// does not take the other down.
type probeRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when both duties have returned
}

// stop stops the server and waits for it; it may be called more than once.
func (pr *probeRun) stop() {
	pr.cancel()
	<-pr.done
}

// startProbes starts the probe server before anything else, so that the
// kubelet's probes are answered from the agent's first moment: liveness
// passes (the agent's own loop), readiness fails with what the pod waits
// for (dependencies, the bootstrap). Until the steady state stores the
// service's Health, it answers with one that has no checks.
func (a *Agent) startProbes(p *Plan) *probeRun {
	cfg := p.Config
	if a.health.Load() == nil {
		early, _ := probes.New(probes.Config{Logger: a.log}) // no checks: cannot fail
		a.health.Store(early)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &probeRun{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, l := range []struct{ duty, addr, sock string }{
		{"probe-server", probeAddress(cfg), ""},
		{"probe-socket", "", probeSocket(cfg)},
	} {
		if l.addr == "" && l.sock == "" {
			continue
		}
		wg.Go(func() {
			a.sideDuty(ctx, l.duty, func(ctx context.Context) error {
				return a.serveProbes(ctx, l.addr, l.sock)
			})
		})
	}
	go func() { wg.Wait(); close(pr.done) }()
	return pr
}

// gate sets (or with "", clears) a readiness gate on the Health the probe
// server answers with, if it runs.
func (a *Agent) gate(name, reason string) {
	h := a.health.Load()
	switch {
	case h == nil:
	case reason == "":
		h.ClearGate(name)
	default:
		h.SetGate(name, reason)
	}
}

// serveProbes serves until ctx ends; an error before that (the address is
// taken) is the duty's failure.
func (a *Agent) serveProbes(ctx context.Context, addr, sock string) error {
	srv, err := probes.NewServer(probes.ServerConfig{Address: addr, Socket: sock, Current: a.health.Load, Gatherer: a.registry, Logger: a.log})
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
func (a *Agent) sideDuty(ctx context.Context, name string, fn func(context.Context) error) {
	fresh := retry.Restart()
	b := fresh
	for {
		start := time.Now()
		err := fn(ctx)
		if time.Since(start) > fresh.Cap {
			b = fresh // it worked for a while: this failure is a new one
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped by itself")
		}
		a.metrics.dutyFailures.WithLabelValues(name).Inc()
		delay := b.Step()
		a.log.Warn("agent duty failed; the service is not affected; retrying", "duty", name, "error", err.Error(), "retry_in", delay.Round(time.Millisecond).String())
		a.health.Load().SetDegraded(name, err.Error())
		if !retry.Sleep(ctx, nil, delay) {
			return
		}
		a.health.Load().SetDegraded(name, "")
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
