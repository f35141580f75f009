package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

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

// kollaConfig loads kolla's config.json (or config.yaml) when kolla mode applies:
// no --config, and the file is in the kolla config dir (read through the
// overlay, if any). Nil when not.
func (s *session) kollaConfig(overlay ...render.Overlay) (*kolla.Config, error) {
	if s.ExplicitConfig {
		return nil, nil
	}
	var o render.Overlay
	if len(overlay) > 0 {
		o = overlay[0]
	}
	path, err := kolla.FindIn(o.Host(s.opts.Root, kolla.ConfigDir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, configErr("%v", err)
	}
	c, err := kolla.Load(path)
	if err != nil {
		return nil, configErr("%v", err)
	}
	return c, nil
}

// render renders kolla's config.json (kolla mode) and then the templates of
// agent.yaml. In check and dry-run modes nothing is written and the
// differences are returned. The kolla config, if any, is returned for its
// command.
func (s *session) render(ctx context.Context, mode RenderMode) (*kolla.Config, []render.Difference, error) {
	var r *kolla.Output
	var err error
	if mode == RenderApply {
		r, err = s.renderAndCommit(ctx)
	} else {
		r, err = s.renderConfig(ctx, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	if mode == RenderApply {
		return r.Kolla, nil, nil
	}
	diffs, err := r.Differences(mode == RenderDryRun)
	if err != nil {
		return nil, nil, err
	}
	return r.Kolla, diffs, nil
}

// renderAndCommit is the render at the start: kolla's plan is applied
// before the templates are rendered, since a template's destination may be
// in a directory only the kolla config creates (/etc/keystone in a fresh
// container). A reload renders everything first (renderConfig): by then
// the directories exist.
func (s *session) renderAndCommit(ctx context.Context) (*kolla.Output, error) {
	r, err := s.renderConfigWith(ctx, nil, true)
	if err != nil {
		return nil, err
	}
	return r, r.Commit()
}

// renderConfig renders kolla's config.json (kolla mode) and the templates
// of agent.yaml into memory. An overlay (nil: none) reads the sources of
// some volumes from the agent's copies of their ConfigMaps.
func (s *session) renderConfig(ctx context.Context, ov render.Overlay) (*kolla.Output, error) {
	return s.renderConfigWith(ctx, ov, false)
}

func (s *session) renderConfigWith(ctx context.Context, ov render.Overlay, applyKolla bool) (*kolla.Output, error) {
	kc, err := s.kollaConfig(ov)
	if err != nil {
		return nil, err
	}
	r := &kolla.Output{Kolla: kc}
	if kc != nil {
		strategy := s.env("KOLLA_CONFIG_STRATEGY")
		if strategy == "" {
			strategy = "COPY_ALWAYS" // what kolla-kubernetes sets; kolla itself refuses an unset one
		}
		if r.Plan, err = kolla.NewPlan(kc, kolla.Options{Root: s.opts.Root, StateDir: kolla.DefaultStateDir, Strategy: strategy, Overlay: ov, Logger: s.log}); err != nil {
			return nil, configErr("%v", err)
		}
		if applyKolla {
			if err := r.Plan.Apply(); err != nil {
				return nil, fmt.Errorf("render: %w", err)
			}
			r.Applied = true
		}
	}
	items := s.Config.Render
	if len(items) == 0 {
		return r, nil
	}
	ts := make([]render.TemplateItem, len(items))
	for i, it := range items {
		ts[i] = render.TemplateItem{Src: it.Src, Dest: it.Dest, Owner: it.Owner, Perm: it.Perm}
	}
	o := s.templateOptions()
	o.Overlay = ov
	if r.Templates, err = render.RenderTemplates(ctx, ts, o); err != nil {
		return nil, s.templateErr(err)
	}
	return r, nil
}

// templateOptions gives templates the pod's environment, the cluster's DNS
// (when it can be reached: a template that asks DNS without it fails, one
// that does not, renders) and the config's limits.
func (s *session) templateOptions() render.TemplateOptions {
	c := s.Config
	o := render.TemplateOptions{
		LookupEnv:       s.opts.LookupEnv,
		AllowedFileDirs: c.RenderOptions.AllowFiles,
		Timeout:         c.RenderOptions.Timeout.Duration(),
		Root:            s.opts.Root,
		Logger:          s.log,
	}
	if r, err := s.resolver(s.Namespace); err == nil {
		o.Resolver, o.ClusterDomain = r, r.ClusterDomain()
	} else {
		s.log.Debug("templates get no DNS", "error", err.Error())
	}
	// publicURL and internalURL ask the API, when there is one.
	if kube, err := s.kubeClient(); err == nil && kube != nil {
		if w, err := s.exposureWaiter(kube); err == nil {
			o.Exposer = w
		}
	}
	return o
}

// templateErr: a discovered value that never came is a wait failure (exit 2);
// anything else about a template is bad input (exit 1). Both name the config.
func (s *session) templateErr(err error) error {
	err = fmt.Errorf("%s: %w", s.Source, err)
	if errors.Is(err, discovery.ErrTimeout) {
		return err
	}
	return &ConfigError{Err: err}
}

// runService is `kolla-agent run [-- CMD...]`: wait, render, then run the
// service (or kolla's bootstrap/upgrade command) and return its exit code.
func (s *session) runService(ctx context.Context, args []string) (int, error) {
	cfg := s.Config
	// With probes, the probe server answers from the start: liveness
	// passes while the agent waits, readiness says for what.
	if cfg.SteadyState() && s.supervise(cfg.Run.Supervise, true) {
		if err := s.checkDirs(cfg); err != nil {
			return 0, err
		}
		s.probes = s.startProbes(cfg)
		defer s.probes.stop()
	}
	s.gate("starting", "waiting for dependencies")
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	s.gate("starting", "rendering the config")
	rc, err := s.renderAndCommit(ctx)
	if err != nil {
		s.reportFailure(nil, "RenderFailed", err)
		return 0, err
	}
	s.rendered = rc
	run := cfg.Run
	cred, err := supervise.LookupCredential(s.opts.Root, run.User, run.Group)
	if err != nil {
		return 0, configErr("run.user/run.group: %v", err)
	}
	env := supervise.ChildEnv(os.Environ(), cred)
	s.closeToken()
	command, oneShot, err := s.command(rc.Kolla, args)
	if err != nil {
		return 0, err
	}
	var hook kolla.Hook
	switch {
	case rc.Kolla != nil && oneShot:
		// run.bootstrap or run.upgrade, which agent.yaml asks for, takes
		// the place of what the image's hook does on KOLLA_BOOTSTRAP.
		s.log.Info("kolla: the image's start hook is not run: agent.yaml's one-shot command is")
	case rc.Kolla != nil:
		if hook, err = s.kollaStart(ctx, rc.Kolla, env, cred); err != nil {
			return 0, err
		}
		if hook.Exited {
			// start.sh sources the hook: its exit is the container's
			// (KOLLA_BOOTSTRAP, KOLLA_UPGRADE, KOLLA_FINISH_UPGRADE).
			s.log.Info("kolla: the image's start hook exited; so does the container", "code", hook.Code)
			return hook.Code, nil
		}
		if hook.Ran {
			env = hook.Env
		}
	}
	if len(hook.Args) > 0 {
		if len(args) == 0 && run.Command == "" && !oneShot {
			command = append(command, hook.Args...) // start.sh: exec ${CMD} ${ARGS}
			s.log.Info("kolla: the start hook's ARGS appended to the command", "args", hook.Args)
		} else {
			s.log.Warn("kolla: the start hook set ARGS for config.json's command, which is not the one run; ignored", "args", hook.Args)
		}
	}
	if oneShot {
		// kolla's KOLLA_BOOTSTRAP/KOLLA_UPGRADE: the bootstrap command in
		// place of the service, run as `kolla-agent bootstrap` runs it.
		return s.runCommand(ctx, command)
	}
	s.gate("starting", "")
	if err := s.bootstrap(ctx); err != nil {
		return 0, err
	}
	if len(command) == 0 {
		return 0, configErr("run: no command: give one after --, in run.command of agent.yaml, or in kolla's config.json")
	}
	if !s.supervise(run.Supervise, cfg.SteadyState()) {
		return 0, execAs(command, env, cred)
	}
	h, err := s.supervised(supervise.Config{Command: command, Env: env, Credential: cred, Grace: cfg.Run.Grace.Duration(), Logger: s.log, Signals: supervise.ForwardedSignals()})
	if err != nil {
		return 0, err
	}
	st, err := s.newSteady(h)
	if err != nil {
		return 0, err
	}
	code, err := st.run(ctx)
	var cerr *ConfigError
	switch {
	case errors.As(err, &cerr):
		return 0, err
	case err != nil:
		// The service could not start (127 not found, 126 not executable):
		// exit with the code a shell would give, and say why.
		s.log.Error("service failed to start", "command", command[0], "error", err.Error(), "code", code)
		s.reportFailure(nil, "ServiceStartFailed", err)
	}
	s.metrics.exitCode.Set(float64(code))
	return code, nil
}

// supervised is the service's handle under run: a supervisor, which a
// reload may restart inside the container. Without reload the agent exits
// with the service.
func (s *session) supervised(sc supervise.Config) (*serviceHandle, error) {
	newSup := func() (*supervise.Supervisor, error) { return supervise.New(sc) }
	h := &serviceHandle{env: sc.Env, argv: sc.Command}
	if s.Config.Reload == nil {
		sup, err := newSup()
		if err != nil {
			return nil, configErr("run: %v", err)
		}
		s.metrics.restarts(func() int { return 0 })
		h.svc, h.pids, h.spawner = sup, sup, sup
		return h, nil
	}
	sup, err := supervise.NewRestartable(newSup)
	if err != nil {
		return nil, configErr("run: %v", err)
	}
	s.metrics.restarts(sup.Restarts)
	h.svc, h.pids, h.spawner, h.signal, h.restart = sup, sup, sup, sup, sup.Restart
	return h, nil
}

// kollaStart runs kolla's start.sh steps (agent/kolla) as the service's
// user, in its environment; what the image lacks for them is bad input.
func (s *session) kollaStart(ctx context.Context, kc *kolla.Config, env []string, cred *supervise.Identity) (kolla.Hook, error) {
	s.gate("starting", "running kolla's start hooks")
	_, skip := s.opts.LookupEnv("KOLLA_SKIP_EXTEND_START")
	hook, err := kolla.Start(ctx, kolla.StartConfig{Root: s.opts.Root, Command: kc.Command, Env: env, Credential: cred, SkipExtendStart: skip, Logger: s.log})
	if ie := (*kolla.ImageError)(nil); errors.As(err, &ie) {
		err = &ConfigError{Err: err}
	}
	if err != nil {
		s.reportFailure(nil, "KollaStartFailed", err)
	}
	return hook, err
}

// command chooses what to run: kolla's bootstrap or upgrade command when
// KOLLA_BOOTSTRAP or KOLLA_UPGRADE is in the environment (an empty value
// counts, as in kolla's extend_start.sh) and one is configured (oneShot);
// else the command after --, else run.command, else kolla's config.json
// command.
func (s *session) command(kc *kolla.Config, args []string) (command []string, oneShot bool, err error) {
	run := s.Config.Run
	pick := func(field, s string) ([]string, error) {
		words, err := shlex.Split(s)
		if err != nil {
			return nil, configErr("%s %q: %v", field, s, err)
		}
		return words, nil
	}
	if _, ok := s.opts.LookupEnv("KOLLA_UPGRADE"); ok && run.Upgrade != "" {
		s.log.Info("KOLLA_UPGRADE is set: running the upgrade command instead of the service", "command", run.Upgrade)
		command, err = pick("run.upgrade", run.Upgrade)
		return command, true, err
	}
	if _, ok := s.opts.LookupEnv("KOLLA_BOOTSTRAP"); ok && run.Bootstrap != "" {
		s.log.Info("KOLLA_BOOTSTRAP is set: running the bootstrap command instead of the service", "command", run.Bootstrap)
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

// execAs replaces the agent with the service, as the given user.
func execAs(command, env []string, cred *supervise.Identity) error {
	if err := supervise.Become(cred); err != nil {
		return err
	}
	return execEnv(command, env)
}
