package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/shlex"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/agent/supervise"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// bootstrap runs the bootstrap: section's steps that come before the
// service (all of them, or the phases before the rollout), after the wait
// and the render: lease mode's command needs the rendered config. Bad input
// is a ConfigError; a failed or timed-out bootstrap is reported (log,
// termination message, Event) and returned.
func (s *session) bootstrap(ctx context.Context) error {
	b := &s.Config.Bootstrap
	if !b.Enabled() {
		return s.bootstrapEndpoints(ctx)
	}
	run, err := s.bootstrapRun(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.Timeout.Duration())
	defer cancel()
	start := time.Now()
	for _, st := range run.steps(false) {
		if err := run.step(ctx, st); err != nil {
			if errors.Is(err, bootstrap.ErrInvalid) {
				return &ConfigError{Err: fmt.Errorf("%s: bootstrap: %w", s.Source, err)}
			}
			s.reportFailure(run.kube, "BootstrapFailed", err)
			run.markPod(false, "BootstrapFailed", err.Error())
			return err
		}
	}
	s.log.Info("bootstrap done", "name", b.Name, "mode", b.Mode, "version", run.version, "took", time.Since(start).Round(time.Millisecond).String())
	if err := s.bootstrapEndpoints(ctx); err != nil {
		return err
	}
	run.markPod(true, "Bootstrapped", fmt.Sprintf("%s %s done", b.Name, run.version))
	return nil
}

// bootstrapEndpoints keeps the Keystone catalog, when configured, as the
// bootstrap's last step; a failure stops the pod like a failed bootstrap.
func (s *session) bootstrapEndpoints(ctx context.Context) error {
	b := &s.Config.Bootstrap
	if b.Endpoints == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.Timeout.Duration())
	defer cancel()
	changes, err := s.endpoints(ctx, false)
	var cerr *ConfigError
	switch {
	case errors.As(err, &cerr):
		return err
	case err != nil:
		err = fmt.Errorf("%w: keystone catalog: %v", bootstrap.ErrFailed, err)
		s.reportFailure(s.kube, "EndpointsFailed", err)
		return err
	}
	s.log.Info("keystone catalog up to date", "service", b.Endpoints.Name, "changes", len(changes))
	return nil
}

// newRolloutDuty runs the bootstrap's phases that wait for the rollout
// (contract) beside the service, when there are any; then it waits for its
// turn in the shutdown (the service runs on).
func (s *session) newRolloutDuty() *duty {
	if s.boot == nil || len(s.boot.steps(true)) == 0 {
		return nil
	}
	return &duty{name: "bootstrap-after-rollout", early: true, run: func(ctx context.Context) error {
		s.afterRollout(ctx)
		<-ctx.Done()
		return nil
	}}
}

// afterRollout runs the phases that wait for the rollout (contract) beside
// the service: once every replica of the pod's Deployment or StatefulSet
// runs this version, whichever replica sees it first creates the step's Job
// (the others get AlreadyExists and watch it). A recorded phase is skipped;
// a newer rollout leaves the phase to the newer pods. A failure is
// reported (log, Event) but never stops the service.
func (s *session) afterRollout(ctx context.Context) {
	r := s.boot
	if r == nil {
		return
	}
	kind, name := r.cfg.OwnerRef()
	for _, st := range r.steps(true) {
		if done, _ := r.coord.Recorded(ctx, st); done {
			continue
		}
		err := r.coord.WaitRollout(ctx, st, r.pod, bootstrap.Owner{Kind: kind, Name: name})
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout.Duration())
			err = r.step(sctx, st)
			cancel()
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, bootstrap.ErrSuperseded):
			s.log.Info("a newer revision is rolling out; its pods run the later phases", "step", st.String(), "why", err.Error())
			return
		case err != nil:
			// Not the termination message: the container runs on, and a
			// later exit would be blamed on this.
			s.log.Error("bootstrap phase after the rollout failed; the service runs on", "step", st.String(), "error", err.Error())
			if eerr := s.post(r.kube, event{"Warning", "BootstrapFailed", truncate(err.Error(), 1024)}); eerr != nil {
				s.log.Debug("could not post an Event", "error", eerr.Error())
			}
			return
		}
	}
}

// podIdentity names this replica (a Lease holder, a Job's creator): POD_NAME,
// else the hostname, which is the pod's name unless the spec sets hostname.
func (s *session) podIdentity() (string, error) {
	if s.PodName != "" {
		return s.PodName, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("POD_NAME is not set and the hostname is unknown: %v", err)
	}
	return h, nil
}

// bootRun is one bootstrap's resolved inputs.
type bootRun struct {
	s       *session
	cfg     *config.Bootstrap
	kube    *discovery.Kube
	coord   *bootstrap.Coordinator
	pod     string
	version string
}

// later reports whether phase waits for the rollout.
func (r *bootRun) later(phase string) bool {
	for _, ph := range r.cfg.Phases {
		if ph.Name == phase {
			return ph.Later()
		}
	}
	return false
}

// bootstrapRun resolves the version and builds the coordinator, once per
// agent: the steady state's after-rollout phases use the same.
func (s *session) bootstrapRun(ctx context.Context) (*bootRun, error) {
	if s.boot != nil {
		return s.boot, nil
	}
	b := &s.Config.Bootstrap
	kube, err := s.kubeClient()
	if err != nil {
		return nil, err
	}
	if kube == nil {
		return nil, configErr("%s: bootstrap needs the Kubernetes API, but there is no service-account token and no --kubeconfig/KUBECONFIG", s.Source)
	}
	pod, err := s.podIdentity()
	if err != nil {
		return nil, configErr("bootstrap: %v", err)
	}
	r := &bootRun{s: s, cfg: b, kube: kube, pod: pod}
	r.coord, err = bootstrap.New(bootstrap.Config{
		Kube: kube, Namespace: s.Namespace, Name: b.Name, PodName: pod,
		Report: s.bootstrapProgress(kube), Logger: s.log, Registerer: s.registry,
	})
	if err != nil {
		return nil, configErr("%v", err)
	}
	if r.version, err = r.resolveVersion(ctx); err != nil {
		return nil, err
	}
	s.boot = r
	return r, nil
}

// resolveVersion: the configured version, else the content hash of what
// the bootstrap does (create: the Job rendered without a phase; lease: the
// commands; wait: the Jobs waited for) and of the inputs.
func (r *bootRun) resolveVersion(ctx context.Context) (string, error) {
	if r.cfg.Version != "" {
		return r.cfg.Version, nil
	}
	inputs := map[string][]byte{}
	for i, path := range r.cfg.Inputs {
		data, err := os.ReadFile(r.s.path(path))
		if err != nil {
			return "", configErr("%s: bootstrap.inputs[%d]: %v", r.s.Source, i, err)
		}
		inputs[path] = data
	}
	// The phases' commands count in every mode: a changed --expand is a new
	// version. In lease and wait mode nothing else says what the pod runs,
	// so its containers' images count too (one GET of the pod): a new image
	// is a new version, where hashing the command alone would let the new
	// pods pass against the old version's record.
	parts := []string{r.cfg.Command}
	for _, ph := range r.cfg.Phases {
		parts = append(parts, ph.Name+"="+ph.Command)
	}
	var what []byte // a manifest (parsed as YAML); the rest goes in as inputs
	switch r.cfg.Mode {
	case config.BootstrapCreate:
		m, err := r.renderJob(ctx, bootstrap.Step{}, "")
		if err != nil {
			return "", err
		}
		what = m
		inputs["(commands)"] = []byte(strings.Join(parts, "\n"))
	case config.BootstrapLease, config.BootstrapWait:
		if r.cfg.Mode == config.BootstrapWait {
			parts = r.cfg.Jobs
		}
		images, err := r.coord.PodImages(ctx, r.pod)
		if err != nil {
			return "", configErr("%s: bootstrap: no version given, and the pod's images (which make the default version) cannot be read: %v; set bootstrap.version or POD_NAME", r.s.Source, err)
		}
		inputs["(commands)"] = []byte(strings.Join(append(parts, images...), "\n"))
	}
	v, err := bootstrap.Version(what, inputs)
	if err != nil {
		return "", configErr("%s: bootstrap.job %s: %v", r.s.Source, r.cfg.Job, err)
	}
	return v, nil
}

// steps are the steps before the service (later=false) or after the
// rollout (later=true).
func (r *bootRun) steps(later bool) []bootstrap.Step {
	if len(r.cfg.Phases) == 0 {
		if later {
			return nil
		}
		return []bootstrap.Step{{Version: r.version}}
	}
	var out []bootstrap.Step
	for _, ph := range r.cfg.Phases {
		if ph.Later() == later {
			out = append(out, bootstrap.Step{Phase: ph.Name, Version: r.version})
		}
	}
	return out
}

// command is the step's command: the phase's, else bootstrap.command.
func (r *bootRun) command(s bootstrap.Step) string {
	for _, ph := range r.cfg.Phases {
		if ph.Name == s.Phase && ph.Command != "" {
			return ph.Command
		}
	}
	return r.cfg.Command
}

// step runs one step in the configured mode.
func (r *bootRun) step(ctx context.Context, s bootstrap.Step) error {
	switch r.cfg.Mode {
	case config.BootstrapCreate:
		m, err := r.renderJob(ctx, s, r.version)
		if err != nil {
			return err
		}
		al := r.cfg.Allow
		spec := bootstrap.JobSpec{Manifest: m, Source: r.cfg.Job, PermanentExitCodes: r.cfg.PermanentExitCodes,
			Allow: bootstrap.JobAllow{ServiceAccounts: al.ServiceAccounts, HostPaths: al.HostPaths, HostNamespaces: al.HostNamespaces, Privileged: al.Privileged, Capabilities: al.Capabilities}}
		if err := r.coord.CheckJob(spec, s); err != nil {
			return err
		}
		return r.coord.Create(ctx, s, spec, r.cfg.Retries)
	case config.BootstrapLease:
		// The command is a template too, so that, say, keystone-manage
		// bootstrap gets --bootstrap-public-url {{ publicURL ... }}.
		cmd, err := render.RenderTemplate(ctx, "bootstrap.command", []byte(r.command(s)), r.s.templateOptions())
		if err != nil {
			return r.s.templateErr(err)
		}
		argv, err := shlex.Split(string(cmd))
		if err != nil || len(argv) == 0 {
			return configErr("%s: bootstrap.command %q: not a command", r.s.Source, cmd)
		}
		return r.coord.Lease(ctx, s, bootstrap.LeaseOptions{Duration: r.cfg.LeaseDuration.Duration()}, func(ctx context.Context) (int, error) {
			return r.s.runCommand(ctx, argv)
		})
	case config.BootstrapWait:
		deps, err := r.cfg.WaitJobs()
		if err != nil {
			return configErr("%s: %v", r.s.Source, err)
		}
		return r.coord.Wait(ctx, s, strings.Join(r.cfg.Jobs, ", "), func(ctx context.Context) error {
			w, err := discovery.New(discovery.Config{Dependencies: deps, Namespace: r.s.Namespace, PodName: r.s.PodName, Kube: r.kube, Logger: r.s.log})
			if err != nil {
				return &ConfigError{Err: err}
			}
			return w.Run(ctx)
		})
	}
	return configErr("bootstrap.mode %q", r.cfg.Mode)
}

// renderJob renders the Job's template with the template functions of the
// config's templates; the template sees .Bootstrap.{Name,Phase,Command,
// Version}. The version is "" while the version itself is being computed.
func (r *bootRun) renderJob(ctx context.Context, s bootstrap.Step, version string) ([]byte, error) {
	src, err := os.ReadFile(r.s.path(r.cfg.Job))
	if err != nil {
		return nil, configErr("%s: bootstrap.job: %v", r.s.Source, err)
	}
	o := r.s.templateOptions()
	o.Data = map[string]any{"Bootstrap": map[string]any{
		"Name": r.cfg.Name, "Phase": s.Phase, "Command": r.command(s), "Version": version,
	}}
	out, err := render.RenderTemplate(ctx, r.cfg.Job, src, o)
	if err != nil {
		return nil, r.s.templateErr(err)
	}
	return out, nil
}

// bootstrapProgress logs each change of a step's state, posts the
// noteworthy ones as Events on the pod, and holds readiness while a step is
// not done.
func (s *session) bootstrapProgress(kube *discovery.Kube) func(bootstrap.Progress) {
	var last bootstrap.Progress
	return func(pr bootstrap.Progress) {
		if pr == last {
			return
		}
		last = pr
		attrs := []any{"step", pr.Step.String(), "state", string(pr.State), "detail", pr.Detail}
		if pr.State == bootstrap.Failed {
			s.log.Error("bootstrap", attrs...)
		} else {
			s.log.Info("bootstrap", attrs...)
		}
		// The phases after the rollout run while the pod serves: they
		// never hold its readiness.
		if s.boot == nil || !s.boot.later(pr.Step.Phase) {
			reason := ""
			if pr.State != bootstrap.Done {
				reason = pr.Step.String() + ": " + pr.Detail
			}
			s.gate("bootstrap", reason)
		}
		if pr.Event != "" {
			typ := "Normal"
			if pr.State == bootstrap.Failed {
				typ = "Warning"
			}
			if err := s.post(kube, event{typ, pr.Event, pr.Step.String() + ": " + pr.Detail}); err != nil {
				s.log.Debug("could not post an Event", "reason", pr.Event, "error", err.Error())
			}
		}
	}
}

// markPod sets the pod condition kolla.openstack.org/bootstrapped when the
// config asks for it.
func (r *bootRun) markPod(ok bool, reason, msg string) {
	if r == nil || !r.cfg.PodCondition || r.s.PodName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.coord.SetPodCondition(ctx, r.s.PodName, ok, reason, truncate(msg, 1024)); err != nil {
		r.s.log.Warn("could not set the pod condition "+bootstrap.ConditionBootstrapped, "error", err.Error())
	}
}

// runCommand runs a bootstrap command in the foreground as the service's
// user, its output passed through, and returns its exit code. On failure
// the last lines of its output go to the termination message, where
// `kubectl describe pod` shows them.
func (s *session) runCommand(ctx context.Context, argv []string) (int, error) {
	run := s.Config.Run
	cred, err := supervise.LookupCredential(s.opts.Root, run.User, run.Group)
	if err != nil {
		return 0, configErr("run.user/run.group: %v", err)
	}
	tail := supervise.NewTail(2048)
	sup, err := supervise.New(supervise.Config{
		Command:    argv,
		Env:        s.childEnv(cred),
		Credential: cred,
		QuietArgs:  true,
		Grace:      s.Config.Run.Grace.Duration(),
		Logger:     s.log,
		Signals:    forwarded(),
		Stdout:     io.MultiWriter(os.Stdout, tail),
		Stderr:     io.MultiWriter(os.Stderr, tail),
	})
	if err != nil {
		return 0, configErr("bootstrap command: %v", err)
	}
	// Only the program: the arguments come from a template that may have
	// read a Secret (--password ...), and no redaction can know that.
	s.log.Info("running the bootstrap command", "program", argv[0], "args", len(argv)-1)
	code, err := sup.Run(ctx)
	if err == nil && code == 0 {
		return 0, nil
	}
	msg := fmt.Sprintf("bootstrap command %s exited with %d", argv[0], code)
	if err != nil {
		msg = fmt.Sprintf("bootstrap command %s did not run: %v", argv[0], err)
	}
	if t := tail.String(); t != "" {
		msg += "; last output:\n" + t
	}
	s.writeTerminationMessage(msg)
	return code, err
}
