package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/kolla"
	"github.com/kolla-agent/kolla-agent/agent/reload"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/probes"
)

// reloadRun is the reload duty of one `run`: the watcher and the pipeline
// (agent/reload), with the agent's means plugged in: its render, the
// service's signal, the readiness checks, Events and metrics.
type reloadRun struct {
	s       *session
	svc     *serviceHandle
	cfg     *config.Reload
	rcfg    reload.Config // completed by run with the service's means
	files   []render.File // the config the service started with
	r       *reload.Reloader
	dirs    []string // the watched volumes' mounts, container paths
	watch   reload.WatchConfig
	api     *reload.APISource // reload.source: api
	metrics *reload.Metrics
	// health is the service's: a reload is verified by its readiness, and a
	// drift between the source and the running config (a source config
	// refused before) shows in it.
	health *probes.Health
}

// holdSlot takes one of the Leases <lease>-0 .. -N-1 (reload.maxUnavailable)
// through the agent's API client, as this replica (reload.HoldSlot).
func (rr *reloadRun) holdSlot(ctx context.Context, lease string) (func(), error) {
	s := rr.s
	kube, err := s.kubeClient()
	switch {
	case err != nil:
		return nil, err
	case kube == nil:
		return nil, errors.New("reload.maxUnavailable needs the Kubernetes API (no service-account token, no --kubeconfig)")
	}
	id, err := s.podIdentity()
	if err != nil {
		return nil, fmt.Errorf("reload.maxUnavailable: %w", err)
	}
	take := func(ctx context.Context, name string) (func(), error) {
		l := &bootstrap.Lease{Kube: kube, Namespace: s.Namespace, Name: name, Identity: id}
		_, release, err := l.Acquire(ctx)
		return release, err
	}
	return reload.HoldSlot(ctx, take, reload.Slots{Lease: lease, N: rr.cfg.MaxUnavailable}, s.log)
}

// ConfigHashAnnotation, on a workload's pod template, is the hash of the
// config its pods run: action rollout sets it to roll the pods out.
const ConfigHashAnnotation = "kolla.openstack.org/config-hash"

// signaller is what the reload needs of the service: its main process's
// PID (0: none) and a way to signal it.
type signaller interface {
	Signal(ctx context.Context, sig syscall.Signal) error
	PID() int
}

// gate shows a reload being acted on and verified in /readyz. A restart
// stops the service, so readiness fails meanwhile; a signal is a graceful
// reload that keeps it serving, so the pod stays Ready (only the verbose
// output says "reloading") and a broken config is judged by the readiness
// checks themselves, as any outage is.
func (rr *reloadRun) gate(changed []string, reason string) {
	h := rr.s.health.Load()
	switch {
	case h == nil:
	case rr.cfg.Strongest(changed) == "restart":
		rr.s.gate("reloading", reason)
	default:
		h.SetDegraded("reloading", reason)
	}
}

// settled, for a signal, notes the service's workers before it is sent and
// returns the wait after which readiness proves the new config: until every
// one of those workers has exited (a graceful reload replaced them), at most
// reload.settle after the signal. uWSGI's old workers answered well 53 ms
// after a SIGHUP whose config left it broken a second later.
func (rr *reloadRun) settled(changed []string) func(context.Context) time.Time {
	window := rr.cfg.Settle.Duration()
	if rr.cfg.Strongest(changed) != "signal" || rr.svc.signal == nil || window == 0 {
		return nil
	}
	var before probes.Workers
	if pid := rr.svc.signal.PID(); pid > 0 {
		before = probes.WorkersOf("", pid)
	}
	deadline := time.Now().Add(window)
	return func(ctx context.Context) time.Time {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			now := time.Now()
			switch {
			case len(before) > 0 && before.Gone(""):
				rr.s.log.Debug("reload: the service's workers before the signal have all exited", "workers", len(before))
				return now
			case !now.Before(deadline):
				if len(before) > 0 {
					rr.s.log.Info("reload: workers from before the signal still run; verifying from reload.settle on", "settle", rr.cfg.Settle.Duration().String())
				}
				return now
			}
			select {
			case <-ctx.Done():
				return time.Now()
			case <-t.C:
			}
		}
	}
}

// newReloadDuty is the reload (reload: in agent.yaml; else nil) of the
// service h, verified by health's readiness. Under run the service started
// with the render just committed; in sidecar mode with what is on disk. It
// starts once the service runs, and ends at SIGTERM, before the service is
// stopped.
func (s *session) newReloadDuty(h *serviceHandle, health *probes.Health) (*duty, error) {
	rr, err := s.newReload(h, health)
	if rr == nil || err != nil {
		return nil, err
	}
	return &duty{name: "reload", early: true, run: func(ctx context.Context) error {
		if !h.started(ctx) {
			<-ctx.Done()
			return nil
		}
		s.sideDuty(ctx, "reload", rr.run)
		return nil
	}}, nil
}

func (s *session) newReload(h *serviceHandle, health *probes.Health) (*reloadRun, error) {
	cfg := s.Config.Reload
	if cfg == nil {
		return nil, nil
	}
	var files []render.File
	var kollaMode bool // its config dir is watched too
	if s.rendered != nil {
		files, kollaMode = s.rendered.Files(), s.rendered.Kolla != nil
	} else {
		kc, err := s.kollaConfig()
		if err != nil {
			return nil, err
		}
		kollaMode = kc != nil
	}
	rr := &reloadRun{s: s, svc: h, cfg: cfg, files: files, health: health}
	rr.dirs = s.reloadDirs(kollaMode)
	var hostDirs []string
	for _, d := range rr.dirs {
		hostDirs = append(hostDirs, s.path(d))
	}
	rr.watch = reload.WatchConfig{Dirs: hostDirs, Quiet: cfg.Quiet.Duration(), MaxWait: cfg.MaxWait.Duration(), Rescan: cfg.Rescan.Duration(), Logger: s.log}
	var vals []reload.Validation
	for _, v := range cfg.Validate {
		vals = append(vals, reload.Validation{Dest: v.Dest, Command: v.Command})
	}
	rr.rcfg = reload.Config{
		Render: func(ctx context.Context) (reload.Rendered, error) {
			var ov render.Overlay
			if rr.api != nil {
				ov = rr.api.Current()
			}
			r, err := s.renderConfig(ctx, ov)
			if err != nil {
				return nil, err
			}
			return r, nil
		},
		Validations:   vals,
		VerifyTimeout: cfg.VerifyTimeout.Duration(),
		Gate:          rr.gate,
		Report:        rr.report,
		StateDir:      s.path(cfg.StateDir),
		Logger:        s.log,
	}
	var err error
	if rr.metrics, err = reload.NewMetrics(s.registry, render.Hash(files)); err != nil {
		return nil, err
	}
	return rr, nil
}

// reloadDirs: reload.watch, else the kolla config dir (kolla mode) and the
// volumes of the render sources (the nearest directory with ..data, else
// the source's own directory).
func (s *session) reloadDirs(kollaMode bool) []string {
	c := s.Config
	if len(c.Reload.Watch) > 0 {
		return slices.Clone(c.Reload.Watch)
	}
	var dirs []string
	if kollaMode {
		dirs = append(dirs, kolla.ConfigDir)
	}
	for _, it := range c.Render {
		dir := path.Dir(it.Src)
		for d := dir; d != path.Dir(d); d = path.Dir(d) {
			if _, err := os.Lstat(filepath.Join(s.path(d), "..data")); err == nil {
				dir = d
				break
			}
		}
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// run watches and reloads until ctx ends: one pipeline pass per burst, and
// one at the start for a change made between the start's render and the
// watch.
func (rr *reloadRun) run(ctx context.Context) error {
	s, health := rr.s, rr.health
	c := rr.rcfg
	c.Act = rr.act
	if lease := s.Config.ReloadLease(); lease != "" {
		c.Hold = func(ctx context.Context, changed []string) (func(), error) {
			if a := rr.cfg.Strongest(changed); a != "signal" && a != "restart" {
				return func() {}, nil // the service is not touched: no turn needed
			}
			return rr.holdSlot(ctx, lease)
		}
	}
	c.Verify = health.Verify
	c.Settled = rr.settled
	c.Exec = func(ctx context.Context, argv []string) (string, error) {
		detail, err := probes.NewExec(argv, rr.svc.spawner, rr.svc.env).Check(ctx)
		if ee := (*probes.ExecError)(nil); errors.As(err, &ee) && ee.Output != "" {
			// Its output says why, but may hold what the config holds: the
			// log only, not the Event or the probes' reason.
			s.log.Warn("reload: validator failed", "command", argv[0], "verdict", ee.Verdict, "output", ee.Output)
		}
		return detail, err
	}
	var err error
	if rr.r, err = reload.New(c); err != nil {
		return err
	}
	if rr.files == nil && rr.r.Applied() == "" {
		// Sidecar mode, first start: what the service runs with is what
		// is on disk now.
		if rr.files, err = rr.liveFiles(ctx); err != nil {
			return err
		}
	}
	if rr.files != nil {
		if err := rr.r.Started(rr.files); err != nil {
			s.log.Warn("reload: the running config is not recorded; a failed reload cannot be rolled back to it", "error", err.Error())
		}
		rr.files = nil // a duty run again (sideDuty) keeps what it recorded
	}
	w, vols, err := reload.NewWatcher(rr.watch)
	if err != nil {
		return err
	}
	if len(vols) == 0 {
		s.log.Warn("reload: nothing to watch (no reload.watch, no kolla config dir, no render sources): the config is never reloaded")
		<-ctx.Done()
		return nil
	}
	for _, v := range vols {
		switch v.Kind {
		case "volume":
			s.log.Info("reload: watching", "dir", v.Dir)
		case "directory":
			s.log.Info("reload: watching a directory that is not a ConfigMap volume (no ..data): any change of its files counts", "dir", v.Dir)
		case "file":
			s.log.Warn("reload: a single file, as a subPath mount gives: the kubelet never updates those (kubernetes#50345); mount the whole volume", "path", v.Dir)
		case "missing":
			s.log.Warn("reload: does not exist (yet); looked for again at each rescan", "dir", v.Dir)
		}
	}
	if err := rr.r.Recover(ctx); err != nil {
		return err
	}
	bursts := make(chan reload.Burst, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx, bursts) }()
	var fromAPI <-chan string
	if rr.cfg.Source == "api" {
		if rr.api, err = s.newAPISource(ctx, rr.dirs, rr.rcfg.StateDir); err != nil {
			return err
		}
		defer func() { rr.api = nil }()
		go rr.api.Run(wctx)
		fromAPI = rr.api.Changed()
		s.log.Info("reload: watching the ConfigMaps through the API; the volumes are the fallback")
	}
	rr.pass(ctx, "start")
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-werr:
			return err
		case cm := <-fromAPI:
			rr.pass(ctx, "ConfigMap "+cm+" changed (API)")
		case b := <-bursts:
			if rr.api != nil {
				rr.api.Reconcile()
			}
			rr.pass(ctx, strings.Join(b.Reasons, "; "))
		}
	}
}

// liveFiles is the config as the service has it: the files the render
// writes, read from disk.
func (rr *reloadRun) liveFiles(ctx context.Context) ([]render.File, error) {
	r, err := rr.s.renderConfig(ctx)
	if err != nil {
		return nil, err
	}
	return render.ReadLive(r.Files()), nil
}

func (rr *reloadRun) pass(ctx context.Context, why string) {
	start := time.Now()
	before := rr.r.Applied()
	outcome, err := rr.r.Reload(ctx)
	if ctx.Err() != nil {
		return
	}
	rr.metrics.Pass(outcome, before, rr.r.Applied())
	attrs := []any{"outcome", outcome, "why", why, "took", time.Since(start).Round(time.Millisecond).String()}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	// A skipped config is a drift between the source and the service:
	// shown in the probes' verbose answer until the source changes again.
	if outcome != reload.OutcomeSkipped {
		rr.health.SetDegraded("config-drift", "")
	}
	if outcome == reload.OutcomeUnchanged {
		rr.s.log.Debug("reload pass", attrs...)
	} else {
		rr.s.log.Info("reload pass", attrs...)
	}
}

// act makes the service take the changed files: the strongest action any
// of them asks for.
func (rr *reloadRun) act(ctx context.Context, hash string, changed []string) error {
	switch rr.cfg.Strongest(changed) {
	case "none":
		return nil
	case "signal":
		if rr.svc.signal == nil {
			return errors.New("no service to signal")
		}
		return rr.svc.signal.Signal(ctx, rr.cfg.SignalNumber())
	case "restart":
		if rr.svc.restart == nil {
			return errors.New("no service to restart")
		}
		rr.s.log.Info("reload: restarting the service inside the container")
		return rr.svc.restart(ctx)
	case "rollout":
		// The pod's controller replaces every pod, this one included:
		// each replica patches the same value, so there is one rollout.
		s := rr.s
		kube, err := s.kubeClient()
		switch {
		case err != nil:
			return err
		case kube == nil:
			return errors.New("rollout needs the Kubernetes API (no service-account token, no --kubeconfig)")
		case s.PodName == "":
			return errors.New("rollout needs the pod's name (POD_NAME)")
		}
		// The value is the sources' hash, not the rendered one: a render
		// may hold the pod's own IP or name, and every replica must patch
		// the same value for the rollout to be one.
		src, err := reload.SourceHash(rr.watch.Dirs)
		if err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
		owner, changed, err := bootstrap.Rollout(ctx, kube, s.Namespace, s.PodName, ConfigHashAnnotation, src)
		if err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
		if changed {
			s.log.Info("reload: rolling the pods out with the new config", "owner", owner.Kind+"/"+owner.Name, "sources", src)
		} else {
			s.log.Info("reload: the rollout to this config is under way already", "owner", owner.Kind+"/"+owner.Name, "sources", src)
		}
		return nil
	}
	return fmt.Errorf("unknown action %q", rr.cfg.Strongest(changed))
}

// report posts each outcome as an Event on the pod.
func (rr *reloadRun) report(outcome, hash, msg string) {
	if outcome == reload.OutcomeSkipped && rr.health != nil {
		rr.health.SetDegraded("config-drift", msg)
	}
	reason, typ := map[string]string{
		reload.OutcomeApplied:    "ReloadApplied",
		reload.OutcomeRejected:   "ReloadRejected",
		reload.OutcomeRolledBack: "ReloadRolledBack",
		reload.OutcomeFailed:     "ReloadFailed",
		reload.OutcomeSkipped:    "ReloadSkipped",
	}[outcome], "Warning"
	if reason == "" {
		return
	}
	if outcome == reload.OutcomeApplied {
		typ = "Normal"
	}
	s := rr.s
	kube, err := s.kubeClient()
	if err != nil {
		return
	}
	if err := s.post(kube, event{typ, reason, msg}); err != nil {
		s.log.Debug("could not post an Event", "reason", reason, "error", err.Error())
	}
}
