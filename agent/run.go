package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/google/shlex"

	"github.com/kolla-agent/kolla-agent/agent/kolla"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/agent/supervise"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// RenderMode says what Render does with what it would write.
type RenderMode int

const (
	RenderApply  RenderMode = iota // write it
	RenderCheck                    // compare it with the disk
	RenderDryRun                   // list what would change
)

// kolla loads kolla's config.json (or config.yaml) when kolla mode applies:
// no --config, and the file is in the kolla config dir (read through the
// overlay, if any). Nil when not.
func (a *Agent) kolla(p *Plan, overlay ...render.Overlay) (*render.KollaConfig, error) {
	if p.ExplicitConfig {
		return nil, nil
	}
	var o render.Overlay
	if len(overlay) > 0 {
		o = overlay[0]
	}
	path, err := render.FindKollaIn(o.Host(a.opts.Root, render.KollaConfigDir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, configErr("%v", err)
	}
	c, err := render.LoadKolla(path)
	if err != nil {
		return nil, configErr("%v", err)
	}
	return c, nil
}

// Render renders kolla's config.json (kolla mode) and then the templates of
// agent.yaml. In check and dry-run modes nothing is written and the
// differences are returned. The kolla config, if any, is returned for its
// command.
func (a *Agent) Render(ctx context.Context, p *Plan, mode RenderMode) (*render.KollaConfig, []render.Difference, error) {
	var r *renderedConfig
	var err error
	if mode == RenderApply {
		r, err = a.renderAndCommit(ctx, p)
	} else {
		r, err = a.renderConfig(ctx, p)
	}
	if err != nil {
		return nil, nil, err
	}
	var diffs []render.Difference
	switch mode {
	case RenderApply:
		return r.kc, nil, nil
	case RenderCheck:
		if r.plan != nil {
			if diffs, err = r.plan.Check(); err != nil {
				return nil, nil, err
			}
		}
	case RenderDryRun:
		if r.plan != nil {
			if diffs, err = r.plan.Changes(); err != nil {
				return nil, nil, err
			}
		}
	}
	return r.kc, append(diffs, render.CheckTemplates(r.tmpl)...), nil
}

// renderedConfig is the service's whole config rendered in memory: kolla's
// plan (nil outside kolla mode) and the templates. Nothing is written until
// Commit.
type renderedConfig struct {
	kc      *render.KollaConfig
	plan    *render.KollaPlan
	applied bool // the plan is on disk already (renderAndCommit)
	tmpl    []render.RenderedTemplate
}

// Files is every file the config writes, kolla's then the templates'.
func (r *renderedConfig) Files() []render.File {
	var out []render.File
	if r.plan != nil {
		out = r.plan.Files()
	}
	return append(out, render.TemplateFiles(r.tmpl)...)
}

// Commit writes it: kolla's plan (all or nothing), then the templates,
// each atomically.
func (r *renderedConfig) Commit() error {
	if r.plan != nil && !r.applied {
		if err := r.plan.Apply(); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	if err := render.WriteTemplates(r.tmpl); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	return nil
}

// renderAndCommit is the render at the start: kolla's plan is applied
// before the templates are rendered, since a template's destination may be
// in a directory only the kolla config creates (/etc/keystone in a fresh
// container). A reload renders everything first (renderConfig): by then
// the directories exist.
func (a *Agent) renderAndCommit(ctx context.Context, p *Plan) (*renderedConfig, error) {
	r, err := a.renderConfigWith(ctx, p, nil, true)
	if err != nil {
		return nil, err
	}
	return r, r.Commit()
}

// renderConfig renders kolla's config.json (kolla mode) and the templates
// of agent.yaml into memory. An overlay reads the sources of some volumes
// from the agent's copies of their ConfigMaps.
func (a *Agent) renderConfig(ctx context.Context, p *Plan, overlay ...render.Overlay) (*renderedConfig, error) {
	var ov render.Overlay
	if len(overlay) > 0 {
		ov = overlay[0]
	}
	return a.renderConfigWith(ctx, p, ov, false)
}

func (a *Agent) renderConfigWith(ctx context.Context, p *Plan, ov render.Overlay, applyKolla bool) (*renderedConfig, error) {
	kc, err := a.kolla(p, ov)
	if err != nil {
		return nil, err
	}
	r := &renderedConfig{kc: kc}
	if kc != nil {
		strategy := a.env("KOLLA_CONFIG_STRATEGY")
		if strategy == "" {
			strategy = "COPY_ALWAYS" // what kolla-kubernetes sets; kolla itself refuses an unset one
		}
		if r.plan, err = render.PlanKolla(kc, render.KollaOptions{Root: a.opts.Root, StateDir: render.DefaultKollaStateDir, Strategy: strategy, Overlay: ov, Logger: a.log}); err != nil {
			return nil, configErr("%v", err)
		}
		if applyKolla {
			if err := r.plan.Apply(); err != nil {
				return nil, fmt.Errorf("render: %w", err)
			}
			r.applied = true
		}
	}
	items := p.Config.Render
	if len(items) == 0 {
		return r, nil
	}
	ts := make([]render.TemplateItem, len(items))
	for i, it := range items {
		ts[i] = render.TemplateItem{Src: it.Src, Dest: it.Dest, Owner: it.Owner, Perm: it.Perm}
	}
	o := a.templateOptions(p)
	o.Overlay = ov
	if r.tmpl, err = render.RenderTemplates(ctx, ts, o); err != nil {
		return nil, templateErr(p, err)
	}
	return r, nil
}

// templateOptions gives templates the pod's environment, the cluster's DNS
// (when it can be reached: a template that asks DNS without it fails, one
// that does not, renders) and the config's limits.
func (a *Agent) templateOptions(p *Plan) render.TemplateOptions {
	c := p.Config
	o := render.TemplateOptions{
		LookupEnv:       a.opts.LookupEnv,
		AllowedFileDirs: c.RenderOptions.AllowFiles,
		Timeout:         c.RenderTimeout(),
		Root:            a.opts.Root,
		Logger:          a.log,
	}
	if r, err := a.resolver(p.Namespace); err == nil {
		o.Resolver, o.ClusterDomain = r, r.ClusterDomain()
	} else {
		a.log.Debug("templates get no DNS", "error", err.Error())
	}
	// publicURL and internalURL ask the API, when there is one.
	if kube, err := a.kubeClient(); err == nil && kube != nil {
		if w, err := a.exposureWaiter(p, kube); err == nil {
			o.Exposer = w
		}
	}
	return o
}

// templateErr: a discovered value that never came is a wait failure (exit 2);
// anything else about a template is bad input (exit 1). Both name the config.
func templateErr(p *Plan, err error) error {
	err = fmt.Errorf("%s: %w", p.Source, err)
	if errors.Is(err, discovery.ErrTimeout) {
		return err
	}
	return &ConfigError{Err: err}
}

// RunService is `kolla-agent run [-- CMD...]`: wait, render, then run the
// service (or kolla's bootstrap/upgrade command) and return its exit code.
func (a *Agent) RunService(ctx context.Context, p *Plan, args []string) (int, error) {
	cfg := p.Config
	// With probes, the probe server answers from the start: liveness
	// passes while the agent waits, readiness says for what.
	var pr *probeRun
	if cfg.SteadyState() && a.supervise(cfg.Run.Supervise, true) {
		if err := a.checkDirs(cfg); err != nil {
			return 0, err
		}
		pr = a.startProbes(p)
		defer pr.stop()
	}
	a.gate("starting", "waiting for dependencies")
	if err := a.Wait(ctx, p); err != nil {
		return 0, err
	}
	a.gate("starting", "rendering the config")
	rc, err := a.renderAndCommit(ctx, p)
	if err != nil {
		a.reportFailure(p, nil, "RenderFailed", err)
		return 0, err
	}
	run := cfg.Run
	cred, err := supervise.LookupCredential(a.opts.Root, run.User, run.Group)
	if err != nil {
		return 0, configErr("run.user/run.group: %v", err)
	}
	env := a.childEnv(cred)
	a.closeToken()
	command, oneShot, err := a.command(p, rc.kc, args)
	if err != nil {
		return 0, err
	}
	var hook kolla.Hook
	switch {
	case rc.kc != nil && oneShot:
		// run.bootstrap or run.upgrade, which agent.yaml asks for, takes
		// the place of what the image's hook does on KOLLA_BOOTSTRAP.
		a.log.Info("kolla: the image's start hook is not run: agent.yaml's one-shot command is")
	case rc.kc != nil:
		a.gate("starting", "running kolla's start hooks")
		_, skip := a.opts.LookupEnv("KOLLA_SKIP_EXTEND_START")
		hook, err = kolla.Start(ctx, kolla.StartConfig{Root: a.opts.Root, Command: rc.kc.Command, Env: env, Credential: cred, SkipExtendStart: skip, Logger: a.log})
		if ie := (*kolla.ImageError)(nil); errors.As(err, &ie) {
			err = &ConfigError{Err: err}
		}
		if err != nil {
			a.reportFailure(p, nil, "KollaStartFailed", err)
			return 0, err
		}
		if hook.Exited {
			// start.sh sources the hook: its exit is the container's
			// (KOLLA_BOOTSTRAP, KOLLA_UPGRADE, KOLLA_FINISH_UPGRADE).
			a.log.Info("kolla: the image's start hook exited; so does the container", "code", hook.Code)
			return hook.Code, nil
		}
		if hook.Ran {
			env = hook.Env
		}
	}
	if len(hook.Args) > 0 {
		if len(args) == 0 && run.Command == "" && !oneShot {
			command = append(command, hook.Args...) // start.sh: exec ${CMD} ${ARGS}
			a.log.Info("kolla: the start hook's ARGS appended to the command", "args", hook.Args)
		} else {
			a.log.Warn("kolla: the start hook set ARGS for config.json's command, which is not the one run; ignored", "args", hook.Args)
		}
	}
	if oneShot {
		// kolla's KOLLA_BOOTSTRAP/KOLLA_UPGRADE: the bootstrap command in
		// place of the service, run as `kolla-agent bootstrap` runs it.
		return a.runCommand(ctx, p, command)
	}
	a.gate("starting", "")
	if err := a.Bootstrap(ctx, p); err != nil {
		return 0, err
	}
	if len(command) == 0 {
		return 0, configErr("run: no command: give one after --, in run.command of agent.yaml, or in kolla's config.json")
	}
	if !a.supervise(run.Supervise, cfg.SteadyState()) {
		return 0, execAs(command, env, cred)
	}
	newSup := func() (*supervise.Supervisor, error) {
		return supervise.New(supervise.Config{
			Command:    command,
			Env:        env,
			Credential: cred,
			Grace:      cfg.Grace(),
			Logger:     a.log,
			Signals:    forwarded(),
		})
	}
	rr, err := a.newReload(p, rc.Files(), rc.kc != nil)
	if err != nil {
		return 0, err
	}
	var code int
	if rr == nil {
		s, serr := newSup()
		if serr != nil {
			return 0, configErr("run: %v", serr)
		}
		a.metrics.restarts(func() int { return 0 }) // without reload the agent exits with the service
		code, err = a.steadyState(ctx, p, pr, s, s, s, env, command, nil)
	} else {
		// A reload may restart the service inside the container.
		s, serr := supervise.NewRestartable(newSup)
		if serr != nil {
			return 0, configErr("run: %v", serr)
		}
		rr.signal, rr.restarter = s, s
		a.metrics.restarts(s.Restarts)
		code, err = a.steadyState(ctx, p, pr, s, s, s, env, command, rr)
	}
	var cerr *ConfigError
	switch {
	case errors.As(err, &cerr):
		return 0, err
	case err != nil:
		// The service could not start (127 not found, 126 not executable):
		// exit with the code a shell would give, and say why.
		a.log.Error("service failed to start", "command", command[0], "error", err.Error(), "code", code)
		a.reportFailure(p, nil, "ServiceStartFailed", err)
	}
	a.metrics.exitCode.Set(float64(code))
	return code, nil
}

// forwarded are the signals the supervisor passes to the service as they
// come. SIGTERM is not among them: it stops the agent's steady state, which
// fails readiness first and then stops the service (Supervisor.Stop).
func forwarded() []os.Signal {
	var out []os.Signal
	for _, s := range supervise.DefaultSignals() {
		if s != syscall.SIGTERM {
			out = append(out, s)
		}
	}
	return out
}

// command chooses what to run: kolla's bootstrap or upgrade command when
// KOLLA_BOOTSTRAP or KOLLA_UPGRADE is in the environment (an empty value
// counts, as in kolla's extend_start.sh) and one is configured (oneShot);
// else the command after --, else run.command, else kolla's config.json
// command.
func (a *Agent) command(p *Plan, kc *render.KollaConfig, args []string) (command []string, oneShot bool, err error) {
	run := p.Config.Run
	pick := func(field, s string) ([]string, error) {
		words, err := shlex.Split(s)
		if err != nil {
			return nil, configErr("%s %q: %v", field, s, err)
		}
		return words, nil
	}
	if _, ok := a.opts.LookupEnv("KOLLA_UPGRADE"); ok && run.Upgrade != "" {
		a.log.Info("KOLLA_UPGRADE is set: running the upgrade command instead of the service", "command", run.Upgrade)
		command, err = pick("run.upgrade", run.Upgrade)
		return command, true, err
	}
	if _, ok := a.opts.LookupEnv("KOLLA_BOOTSTRAP"); ok && run.Bootstrap != "" {
		a.log.Info("KOLLA_BOOTSTRAP is set: running the bootstrap command instead of the service", "command", run.Bootstrap)
		command, err = pick("run.bootstrap", run.Bootstrap)
		return command, true, err
	}
	switch {
	case len(args) > 0:
		return args, false, nil
	case run.Command != "":
		command, err = pick("run.command", run.Command)
	case kc != nil && kc.Command != "":
		// kolla splits its command on whitespace and loses quoting; a shell's
		// rules keep `bash -c 'a b'` whole.
		command, err = pick("config.json command", kc.Command)
	}
	return command, false, err
}

// supervise decides whether the agent stays as the service's parent. In
// "auto", it does when it is PID 1, because then it must reap the zombies a
// service leaves, and when a steady-state duty (probes) needs it; otherwise
// it execs the service and costs nothing after.
func (a *Agent) supervise(mode string, steady bool) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	return os.Getpid() == 1 || steady
}

// childEnv is the service's environment: the container's, minus the agent's
// own variables, with HOME, USER and LOGNAME of the user it runs as (what
// kolla's `sudo -u` gives it).
func (a *Agent) childEnv(cred *supervise.Identity) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KOLLA_AGENT_") {
			continue
		}
		if cred != nil && (strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "USER=") || strings.HasPrefix(kv, "LOGNAME=")) {
			continue
		}
		env = append(env, kv)
	}
	if cred != nil {
		env = append(env, "HOME="+cred.Home, "USER="+cred.Name, "LOGNAME="+cred.Name)
	}
	return env
}

// execAs replaces the agent with the service, as the given user.
func execAs(command, env []string, cred *supervise.Identity) error {
	if cred != nil {
		if err := syscall.Setgroups(toInts(cred.Credential.Groups)); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(int(cred.Credential.Gid)); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(int(cred.Credential.Uid)); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
	}
	return execEnv(command, env)
}

func toInts(u []uint32) []int {
	out := make([]int, len(u))
	for i, v := range u {
		out[i] = int(v)
	}
	return out
}
