package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/run"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/reload"
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

// serviceHandle is the service as the duties see it, built once by run or
// sidecar.
type serviceHandle struct {
	svc     service          // the supervised service; nil in sidecar mode
	pids    probes.PIDSource // its main process; nil when there is none
	found   foundProcess     // pids in sidecar mode (another container's); nil otherwise
	spawner probes.Spawner   // starts exec checks and validators
	env     []string         // their environment
	argv    []string         // its command line; nil in sidecar mode
	// signal and restart are what a reload does to it: the supervisor
	// under run, the found process in sidecar mode; nil without reload.
	signal  reload.Signaller
	restart func(context.Context) error
}

// started waits until the service runs (at once in sidecar mode): false
// when it ended first, or ctx did.
func (h *serviceHandle) started(ctx context.Context) bool {
	if h.svc == nil {
		return true
	}
	select {
	case <-h.svc.Running():
		return true
	case <-h.svc.Done():
	case <-ctx.Done():
	}
	return false
}

// duty is one of the agent's duties in the steady state. run works until
// its context ends; a run that returns by itself ends the steady state (the
// service's: it exited). A duty that must not do that runs its work
// through sideDuty, which starts it again.
type duty struct {
	name string
	run  func(ctx context.Context) error
	// stop, when set, runs at the duty's turn in the shutdown, before its
	// context ends: the service's stop sequence, readiness failed.
	stop func()
	// early: the duty's context ends at SIGTERM, and its turn in the
	// shutdown does not wait for it. What could act on the service or
	// start new work (the reload, the bootstrap's later phases, the
	// catalog) must neither hold the service's stop back nor begin
	// anything once the pod is told to stop.
	early bool
}

// add puts d in g. Its context ends at its turn in the shutdown (an early
// duty's at SIGTERM too), and the next turn comes once its run has
// returned (an early duty's at once).
func add(g *run.Group, sigterm context.Context, d *duty) {
	if d.early {
		ctx, cancel := context.WithCancel(sigterm)
		g.Add(func() error { return d.run(ctx) }, func(error) { cancel() })
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.Add(func() error {
		defer close(done)
		return d.run(ctx)
	}, func(error) {
		if d.stop != nil {
			d.stop()
		}
		cancel()
		<-done
	})
}

// steady is the steady state of one run or sidecar, built before the
// service starts: what agent.yaml asks for that cannot be had (a CA file,
// a check's config) is a config error then, not a duty failing later.
type steady struct {
	s      *session
	h      *serviceHandle
	health *probes.Health
	// reload and logs are agent.yaml's duties beside the service (nil:
	// not asked for).
	reload, logs *duty
}

// newSteady builds the service's checks, the reload and the log shipping
// (last: it may open a connection).
func (s *session) newSteady(h *serviceHandle) (*steady, error) {
	health, err := s.newHealth(h)
	if err != nil {
		return nil, err
	}
	reload, err := s.newReloadDuty(h, health)
	if err != nil {
		return nil, err
	}
	logs, err := s.newLogsDuty()
	if err != nil {
		return nil, err
	}
	return &steady{s: s, h: h, health: health, reload: reload, logs: logs}, nil
}

// run runs the duties beside the service as one run group until the
// service exits or ctx ends (SIGTERM), and returns the service's exit code
// (an error: it could not start). Each duty's constructor returns nil when
// agent.yaml does not ask for it. Shutdown runs in the order of the list:
//
//  1. readiness -> stopping (/readyz answers 503 at once; /livez stays 200)
//  2. the reload, which could act on the service (early: ended at SIGTERM)
//  3. the service: SIGTERM, its grace period, then SIGKILL
//  4. the log shipping, which drains what the service wrote last
//  5. the checks
//  6. the bootstrap's later phases and the Keystone catalog (early)
//  7. the probe server, last, so probes answer through the whole stop.
func (st *steady) run(ctx context.Context) (int, error) {
	s, h, health := st.s, st.h, st.health
	if s.probes == nil {
		s.probes = s.startProbes(s.Config)
	}
	s.health.Store(health) // from now on the probe server answers with the service's checks

	var code int
	var svcErr error
	var g run.Group
	for _, d := range []*duty{
		stopDuty(ctx, health, s.log),
		st.reload,
		serviceDuty(h, &code, &svcErr),
		st.logs,
		checksDuty(h, health),
		s.newRolloutDuty(),
		s.newEndpointsDuty(h),
		s.probes.duty(),
	} {
		if d != nil {
			add(&g, ctx, d)
		}
	}
	start := time.Now()
	err := g.Run()
	s.log.Debug("steady state ended", "cause", fmt.Sprint(err), "after", time.Since(start).Round(time.Millisecond).String())
	return code, svcErr
}

// stopDuty is the stop request: SIGTERM (ctx), or the end of the service
// (its duty returning stops this one). Either way readiness fails first.
func stopDuty(sigterm context.Context, health *probes.Health, log *slog.Logger) *duty {
	return &duty{name: "stop", run: func(ctx context.Context) error {
		select {
		case <-sigterm.Done():
			log.Info("stopping: readiness fails from now on")
			return errStopRequested
		case <-ctx.Done():
			return nil
		}
	}, stop: func() { health.SetGate("stopping", "the agent is stopping") }}
}

// serviceDuty runs the supervised service (none in sidecar mode); its
// exit ends the steady state. Its stop is the supervisor's: readiness has
// failed before it.
func serviceDuty(h *serviceHandle, code *int, err *error) *duty {
	if h.svc == nil {
		return nil
	}
	return &duty{name: "service", run: func(ctx context.Context) error {
		*code, *err = h.svc.Run(ctx)
		return fmt.Errorf("service exited with %d", *code)
	}, stop: func() {
		h.svc.Stop()
		<-h.svc.Done()
	}}
}

// checksDuty runs the checks once the service has started (an exec check
// goes through the service's reaper).
func checksDuty(h *serviceHandle, health *probes.Health) *duty {
	return &duty{name: "checks", run: func(ctx context.Context) error {
		if !h.started(ctx) && ctx.Err() != nil {
			return nil
		}
		var wg sync.WaitGroup
		if h.found != nil { // sidecar: another container's process
			t := time.NewTicker(processLook)
			defer t.Stop()
			wg.Go(func() { watchProcess(ctx, h.found, t.C, health.Restarted) })
		}
		health.Run(ctx)
		wg.Wait()
		return nil
	}}
}

// processLook is how often the sidecar looks whether the service's
// process changed: a look at a live process is a few reads of its /proc
// entries.
const processLook = 200 * time.Millisecond

// watchProcess calls changed, at each tick until ctx ends, when the
// service's process went (none found at two ticks in a row: a pid file
// read while its daemon rewrites it is none once), when another took its
// place (a restart counted by pids: a reused pid is another), and when one
// is found after it went: what the checks judged meanwhile was no
// process's, and a failure then must not count against the new one. The
// first process found is the start the checks waited for, no change.
func watchProcess(ctx context.Context, pids foundProcess, tick <-chan time.Time, changed func()) {
	had, gone, missing := false, false, 0
	restarts := pids.Restarts()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		pid, n := pids.PID(), pids.Restarts()
		switch {
		case pid == 0:
			if missing++; had && !gone && missing == 2 {
				gone = true
				changed()
			}
		case gone || n != restarts:
			gone = false
			changed()
		}
		// The count is taken only with a process found: the checks' own
		// PID calls may count the new one between this tick's two reads.
		if pid != 0 {
			had, missing, restarts = true, 0, n
		}
	}
}

// newHealth builds the service's checks (probes.checks), with one
// dependency waiter for the checks that follow dependencies.
func (s *session) newHealth(h *serviceHandle) (*probes.Health, error) {
	var deps *discovery.Waiter
	if wait := probes.Dependencies(s.Config.Probes.Checks); len(wait) > 0 {
		dc, err := s.discoveryConfig(wait)
		if err != nil {
			return nil, err
		}
		if deps, err = discovery.New(dc); err != nil {
			return nil, configErr("%s: probes: %v", s.Source, err)
		}
	}
	specs, err := probes.SpecsFrom(s.Config.Probes.Checks, probes.Means{PIDs: h.pids, Spawner: h.spawner, Env: h.env, Argv: h.argv,
		Sidecar: h.svc == nil, Root: s.opts.Root, Dependencies: deps, Logger: s.log})
	if err != nil {
		return nil, configErr("%s: %v", s.Source, err)
	}
	health, err := probes.New(probes.Config{Checks: specs, DrainFile: s.Config.Probes.DrainFile, Logger: s.log, Registerer: s.registry})
	if err != nil {
		return nil, configErr("%s: %v", s.Source, err)
	}
	return health, nil
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

// duty keeps the server, already serving, until the last turn of the
// shutdown. (With no listener configured there is nothing to wait for:
// the duty still waits for its turn.)
func (pr *probeRun) duty() *duty {
	return &duty{name: "probe-server", run: func(ctx context.Context) error {
		<-ctx.Done()
		pr.stop()
		return nil
	}}
}

// startProbes starts the probe server before anything else, so that the
// kubelet's probes are answered from the agent's first moment: liveness
// passes (the agent's own loop), readiness fails with what the pod waits
// for (dependencies, the bootstrap). Until the steady state stores the
// service's Health, it answers with one that has no checks.
func (a *Agent) startProbes(cfg *config.Config) *probeRun {
	if a.health.Load() == nil {
		early, _ := probes.New(probes.Config{Logger: a.log}) // no checks: cannot fail
		a.health.Store(early)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &probeRun{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	addr, sock := probes.Listeners(&cfg.Probes)
	for _, l := range []struct{ duty, addr, sock string }{
		{"probe-server", addr, ""},
		{"probe-socket", "", sock},
	} {
		if l.addr == "" && l.sock == "" {
			continue
		}
		wg.Go(func() {
			a.sideDuty(ctx, l.duty, func(ctx context.Context) error {
				srv, err := probes.NewServer(probes.ServerConfig{Address: l.addr, Socket: l.sock, Current: a.health.Load, Gatherer: a.registry, Logger: a.log})
				if err != nil {
					return err
				}
				return srv.Run(ctx) // an error before ctx ends (the address is taken) is the duty's failure
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

// sideDuty runs a duty that must never take the service down: when it fails
// it is logged, counted, shown in ?verbose, and started again with backoff
// until ctx ends.
func (a *Agent) sideDuty(ctx context.Context, name string, fn func(context.Context) error) {
	retry.Forever(ctx, retry.Loop{
		Schedule: retry.Restart(),
		Failed: func(err error, delay time.Duration) {
			if err == nil {
				err = errors.New("stopped by itself")
			}
			a.metrics.dutyFailures.WithLabelValues(name).Inc()
			a.log.Warn("agent duty failed; the service is not affected; retrying", "duty", name, "error", err.Error(), "retry_in", delay.Round(time.Millisecond).String())
			a.health.Load().SetDegraded(name, err.Error())
		},
		Retrying: func() { a.health.Load().SetDegraded(name, "") },
	}, fn)
}

var _ service = (*supervise.Supervisor)(nil)
