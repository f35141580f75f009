package reload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/kolla"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes"
)

// ConfigHashAnnotation, on a workload's pod template, is the hash of the
// config its pods run: action rollout sets it to roll the pods out.
const ConfigHashAnnotation = "kolla.openstack.org/config-hash"

// Signaller is what the reload needs of the service: its main process's
// PID (0: none) and a way to signal it.
type Signaller interface {
	Signal(ctx context.Context, sig syscall.Signal) error
	PID() int
}

// Means are what the duty needs of the agent and of its service.
type Means struct {
	// Render renders the whole config into memory, the sources of some
	// volumes read from ov (the API source's copies).
	Render func(ctx context.Context, ov render.Overlay) (*kolla.Output, error)
	// Files is the config the service started with (nil in sidecar mode:
	// what is on disk at the first run); Kolla: kolla mode.
	Files []render.File
	Kolla bool
	// Signal and Restart act on the service (nil: none); Spawner and Env
	// run the validators; Health verifies a reload and shows it.
	Signal  Signaller
	Restart func(ctx context.Context) error
	Spawner probes.Spawner
	Env     []string
	Health  *probes.Health
	// Kube is the agent's API client (nil, nil: none); Identity names this
	// replica as a Lease holder; Event posts an Event on the pod.
	Kube               func() (*discovery.Kube, error)
	Identity           func() (string, error)
	Event              func(typ, reason, msg string) error
	Namespace, PodName string
	Root               string // --root
	Logger             *slog.Logger
	Registry           prometheus.Registerer
}

// Duty is the reload duty of one `run` or `sidecar`: the watcher and the
// Reloader, with the agent's means plugged in. Its Run may be started
// again after a failure.
type Duty struct {
	cfg     *config.Reload
	lease   string // reload.maxUnavailable's Leases; "" without
	m       Means
	rcfg    Config
	files   []render.File // the config the service started with, until recorded
	dirs    []string      // the watched volumes' mounts, container paths
	watch   WatchConfig
	api     *APISource      // reload.source: api, while Run runs
	owner   bootstrap.Owner // action rollout's workload, once found (its pod's controller never changes)
	metrics *Metrics
	r       *Reloader
}

// NewDuty builds the reload of c.Reload (not nil) with m; the render
// sources and bootstrap.name of c name what it watches and its Leases.
func NewDuty(c *config.Config, m Means) (*Duty, error) {
	cfg := c.Reload
	d := &Duty{cfg: cfg, lease: c.ReloadLease(), m: m, files: m.Files}
	d.dirs = watchDirs(c, m.Kolla, m.Root)
	var hostDirs []string
	for _, dir := range d.dirs {
		hostDirs = append(hostDirs, render.UnderRoot(m.Root, dir))
	}
	d.watch = WatchConfig{Dirs: hostDirs, Quiet: cfg.Quiet.Duration(), MaxWait: cfg.MaxWait.Duration(), Rescan: cfg.Rescan.Duration(), Logger: m.Logger}
	var vals []Validation
	for _, v := range cfg.Validate {
		vals = append(vals, Validation{Dest: v.Dest, Command: v.Command})
	}
	d.rcfg = Config{
		Render: func(ctx context.Context) (Rendered, error) {
			var ov render.Overlay
			if d.api != nil {
				ov = d.api.Current()
			}
			r, err := m.Render(ctx, ov)
			if err != nil {
				return nil, err
			}
			return r, nil
		},
		Validations:   vals,
		Exec:          d.exec,
		Act:           d.act,
		Verify:        m.Health.Verify,
		VerifyTimeout: cfg.VerifyTimeout.Duration(),
		Settled:       d.settled,
		Gate:          d.gate,
		Report:        d.report,
		StateDir:      render.UnderRoot(m.Root, cfg.StateDir),
		Logger:        m.Logger,
	}
	if d.lease != "" {
		d.rcfg.Hold = func(ctx context.Context, changed []string) (func(), error) {
			if a := cfg.Strongest(changed); a != "signal" && a != "restart" {
				return func() {}, nil // the service is not touched: no turn needed
			}
			return d.holdSlot(ctx)
		}
	}
	var err error
	if d.metrics, err = NewMetrics(m.Registry, render.Hash(m.Files)); err != nil {
		return nil, err
	}
	return d, nil
}

// watchDirs: reload.watch, else the kolla config dir (kolla mode) and the
// volumes of the render sources (the nearest directory with ..data, else
// the source's own directory).
func watchDirs(c *config.Config, kollaMode bool, root string) []string {
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
			if _, err := os.Lstat(filepath.Join(render.UnderRoot(root, d), "..data")); err == nil {
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

// Run watches and reloads until ctx ends: one pipeline pass per burst, and
// one at the start for a change made between the start's render and the
// watch.
func (d *Duty) Run(ctx context.Context) error {
	log := d.m.Logger
	var err error
	if d.r, err = New(d.rcfg); err != nil {
		return err
	}
	if d.files == nil && d.r.Applied() == "" {
		// Sidecar mode, first start: what the service runs with is what
		// is on disk now.
		if d.files, err = d.liveFiles(ctx); err != nil {
			return err
		}
	}
	if d.files != nil {
		if err := d.r.Started(d.files); err != nil {
			log.Warn("reload: the running config is not recorded; a failed reload cannot be rolled back to it", "error", err.Error())
		}
		d.files = nil // a duty run again (sideDuty) keeps what it recorded
	}
	w, vols, err := NewWatcher(d.watch)
	if err != nil {
		return err
	}
	if len(vols) == 0 {
		log.Warn("reload: nothing to watch (no reload.watch, no kolla config dir, no render sources): the config is never reloaded")
		<-ctx.Done()
		return nil
	}
	for _, v := range vols {
		switch v.Kind {
		case "volume":
			log.Info("reload: watching", "dir", v.Dir)
		case "directory":
			log.Info("reload: watching a directory that is not a ConfigMap volume (no ..data): any change of its files counts", "dir", v.Dir)
		case "file":
			log.Warn("reload: a single file, as a subPath mount gives: the kubelet never updates those (kubernetes#50345); mount the whole volume", "path", v.Dir)
		case "missing":
			log.Warn("reload: does not exist (yet); looked for again at each rescan", "dir", v.Dir)
		}
	}
	if err := d.r.Recover(ctx); err != nil {
		return err
	}
	bursts := make(chan Burst, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx, bursts) }()
	var fromAPI <-chan struct{}
	if d.cfg.Source == "api" {
		if d.api, err = d.newAPISource(ctx); err != nil {
			return err
		}
		defer func() { d.api = nil }()
		go d.api.Run(wctx)
		fromAPI = d.api.Changed()
		log.Info("reload: watching the ConfigMaps through the API; the volumes are the fallback")
	}
	d.pass(ctx, "start")
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-werr:
			return err
		case <-fromAPI:
			var why []string
			for _, cm := range d.api.Updated() {
				why = append(why, "ConfigMap "+cm+" changed (API)")
			}
			if len(why) == 0 {
				continue // named by the pass before, which read them
			}
			d.pass(ctx, strings.Join(why, "; "))
		case b := <-bursts:
			if d.api != nil {
				d.api.Reconcile()
			}
			d.pass(ctx, strings.Join(b.Reasons, "; "))
		}
	}
}

// liveFiles is the config as the service has it: the files the render
// writes, read from disk.
func (d *Duty) liveFiles(ctx context.Context) ([]render.File, error) {
	r, err := d.m.Render(ctx, nil)
	if err != nil {
		return nil, err
	}
	return render.ReadLive(r.Files()), nil
}

func (d *Duty) pass(ctx context.Context, why string) {
	start := time.Now()
	before := d.r.Applied()
	outcome, err := d.r.Reload(ctx)
	if ctx.Err() != nil {
		return
	}
	d.metrics.Pass(outcome, before, d.r.Applied())
	attrs := []any{"outcome", outcome, "why", why, "took", time.Since(start).Round(time.Millisecond).String()}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	// A skipped config is a drift between the source and the service:
	// shown in the probes' verbose answer until the source changes again.
	if outcome != OutcomeSkipped {
		d.m.Health.SetDegraded("config-drift", "")
	}
	if outcome == OutcomeUnchanged {
		d.m.Logger.Debug("reload pass", attrs...)
	} else {
		d.m.Logger.Info("reload pass", attrs...)
	}
}

// exec runs a validator as an exec check.
func (d *Duty) exec(ctx context.Context, argv []string) (string, error) {
	detail, err := probes.NewExec(argv, d.m.Spawner, d.m.Env).Check(ctx)
	if ee := (*probes.ExecError)(nil); errors.As(err, &ee) && ee.Output != "" {
		// Its output says why, but may hold what the config holds: the
		// log only, not the Event or the probes' reason.
		d.m.Logger.Warn("reload: validator failed", "command", argv[0], "verdict", ee.Verdict, "output", ee.Output)
	}
	return detail, err
}

// act makes the service take the changed files: the strongest action any
// of them asks for.
func (d *Duty) act(ctx context.Context, hash string, changed []string) error {
	switch d.cfg.Strongest(changed) {
	case "none":
		return nil
	case "signal":
		if d.m.Signal == nil {
			return errors.New("no service to signal")
		}
		return d.m.Signal.Signal(ctx, d.cfg.SignalNumber())
	case "restart":
		if d.m.Restart == nil {
			return errors.New("no service to restart")
		}
		d.m.Logger.Info("reload: restarting the service inside the container")
		return d.m.Restart(ctx)
	case "rollout":
		// The pod's controller replaces every pod, this one included:
		// each replica patches the same value, so there is one rollout.
		kube, err := d.m.Kube()
		switch {
		case err != nil:
			return err
		case kube == nil:
			return errors.New("rollout needs the Kubernetes API (no service-account token, no --kubeconfig)")
		case d.m.PodName == "":
			return errors.New("rollout needs the pod's name (POD_NAME)")
		}
		// The value is the sources' hash, not the rendered one: a render
		// may hold the pod's own IP or name, and every replica must patch
		// the same value for the rollout to be one.
		src, err := SourceHash(d.watch.Dirs)
		if err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
		owner, changed, err := bootstrap.Rollout(ctx, kube, d.m.Namespace, d.m.PodName, d.owner, ConfigHashAnnotation, src)
		if err != nil {
			d.owner = bootstrap.Owner{} // found again next time: it may be what failed
			return fmt.Errorf("rollout: %w", err)
		}
		d.owner = owner
		if changed {
			d.m.Logger.Info("reload: rolling the pods out with the new config", "owner", owner.Kind+"/"+owner.Name, "sources", src)
		} else {
			d.m.Logger.Info("reload: the rollout to this config is under way already", "owner", owner.Kind+"/"+owner.Name, "sources", src)
		}
		return nil
	}
	return fmt.Errorf("unknown action %q", d.cfg.Strongest(changed))
}

// holdSlot takes one of the Leases <lease>-0 .. -N-1 (reload.maxUnavailable)
// through the agent's API client, as this replica (HoldSlot).
func (d *Duty) holdSlot(ctx context.Context) (func(), error) {
	kube, err := d.m.Kube()
	switch {
	case err != nil:
		return nil, err
	case kube == nil:
		return nil, errors.New("reload.maxUnavailable needs the Kubernetes API (no service-account token, no --kubeconfig)")
	}
	id, err := d.m.Identity()
	if err != nil {
		return nil, fmt.Errorf("reload.maxUnavailable: %w", err)
	}
	take := func(ctx context.Context, name string) (func(), error) {
		l := &bootstrap.Lease{Kube: kube, Namespace: d.m.Namespace, Name: name, Identity: id}
		_, release, err := l.Acquire(ctx)
		return release, err
	}
	return HoldSlot(ctx, take, Slots{Lease: d.lease, N: d.cfg.MaxUnavailable}, d.m.Logger)
}

// gate shows a reload being acted on and verified in /readyz. A restart
// stops the service, so readiness fails meanwhile; a signal is a graceful
// reload that keeps it serving, so the pod stays Ready (only the verbose
// output says "reloading") and a broken config is judged by the readiness
// checks themselves, as any outage is.
func (d *Duty) gate(changed []string, reason string) {
	h := d.m.Health
	switch {
	case h == nil:
	case d.cfg.Strongest(changed) != "restart":
		h.SetDegraded("reloading", reason)
	case reason == "":
		h.ClearGate("reloading")
	default:
		h.SetGate("reloading", reason)
	}
}

// settled, for a signal, notes the service's workers before it is sent and
// returns the wait after which readiness proves the new config: until every
// one of those workers has exited (a graceful reload replaced them), at most
// reload.settle after the signal. uWSGI's old workers answered well 53 ms
// after a SIGHUP whose config left it broken a second later.
func (d *Duty) settled(changed []string) func(context.Context) time.Time {
	window := d.cfg.Settle.Duration()
	if d.cfg.Strongest(changed) != "signal" || d.m.Signal == nil || window == 0 {
		return nil
	}
	var before probes.Workers
	if pid := d.m.Signal.PID(); pid > 0 {
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
				d.m.Logger.Debug("reload: the service's workers before the signal have all exited", "workers", len(before))
				// Not now: that was read before the look, while the last
				// worker could still run; a look counted from then could
				// be an old worker's.
				return time.Now()
			case !now.Before(deadline):
				if len(before) > 0 {
					d.m.Logger.Info("reload: workers from before the signal still run; verifying from reload.settle on", "settle", d.cfg.Settle.Duration().String())
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

// report posts each outcome as an Event on the pod.
func (d *Duty) report(outcome, hash, msg string) {
	if outcome == OutcomeSkipped && d.m.Health != nil {
		d.m.Health.SetDegraded("config-drift", msg)
	}
	reason, typ := map[string]string{
		OutcomeApplied:    "ReloadApplied",
		OutcomeRejected:   "ReloadRejected",
		OutcomeRolledBack: "ReloadRolledBack",
		OutcomeFailed:     "ReloadFailed",
		OutcomeSkipped:    "ReloadSkipped",
	}[outcome], "Warning"
	if reason == "" || d.m.Event == nil {
		return
	}
	if outcome == OutcomeApplied {
		typ = "Normal"
	}
	if err := d.m.Event(typ, reason, msg); err != nil {
		d.m.Logger.Debug("could not post an Event", "reason", reason, "error", err.Error())
	}
}

// newAPISource is reload.source: api over the agent's API client, for its
// own pod and namespace.
func (d *Duty) newAPISource(ctx context.Context) (*APISource, error) {
	kube, err := d.m.Kube()
	switch {
	case err != nil:
		return nil, err
	case kube == nil:
		return nil, errors.New("reload.source api needs the Kubernetes API (no service-account token, no --kubeconfig)")
	case d.m.PodName == "":
		return nil, errors.New("reload.source api needs the pod's name (POD_NAME), to find its ConfigMap volumes")
	}
	host := func(p string) string { return render.UnderRoot(d.m.Root, p) }
	return NewAPISource(ctx, configMapAPI{kube: kube, ns: d.m.Namespace, pod: d.m.PodName}, d.dirs, host, d.rcfg.StateDir, d.m.Logger)
}
