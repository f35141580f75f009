package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/agent/supervise"
	"github.com/kolla-agent/kolla-agent/bootstrap"
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
	for _, st := range run.Steps(false) {
		if err := run.Step(ctx, st); err != nil {
			if errors.Is(err, bootstrap.ErrInvalid) {
				return &ConfigError{Err: fmt.Errorf("%s: bootstrap: %w", s.Source, err)}
			}
			s.reportFailure(s.kube, "BootstrapFailed", err)
			run.MarkPod(false, "BootstrapFailed", err.Error())
			return bootErr(err)
		}
	}
	s.log.Info("bootstrap done", "name", b.Name, "mode", b.Mode, "version", run.Version(), "took", time.Since(start).Round(time.Millisecond).String())
	if err := s.bootstrapEndpoints(ctx); err != nil {
		return err
	}
	run.MarkPod(true, "Bootstrapped", fmt.Sprintf("%s %s done", b.Name, run.Version()))
	return nil
}

// bootErr makes the bootstrap's bad input a ConfigError, its text kept.
func bootErr(err error) error {
	if ie := (*bootstrap.InputError)(nil); errors.As(err, &ie) {
		return &ConfigError{Err: err}
	}
	return err
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
	if s.boot == nil || len(s.boot.Steps(true)) == 0 {
		return nil
	}
	return &duty{name: "bootstrap-after-rollout", early: true, run: func(ctx context.Context) error {
		s.boot.AfterRollout(ctx)
		<-ctx.Done()
		return nil
	}}
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

// bootstrapRun builds the bootstrap with the agent's means and resolves
// its version, once per agent: the steady state's after-rollout phases use
// the same.
func (s *session) bootstrapRun(ctx context.Context) (*bootstrap.Run, error) {
	if s.boot != nil {
		return s.boot, nil
	}
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
	r, err := bootstrap.NewRun(ctx, &s.Config.Bootstrap, bootstrap.Means{
		Kube: kube, Namespace: s.Namespace, PodName: s.PodName, Identity: pod,
		Root: s.opts.Root, Source: s.Source, Logger: s.log, Registerer: s.registry,
		Render:  s.renderTemplate,
		Command: s.runCommand,
		Gate:    func(reason string) { s.gate("bootstrap", reason) },
		Event:   func(typ, reason, msg string) error { return s.post(kube, event{typ, reason, msg}) },
	})
	if err != nil {
		return nil, bootErr(err)
	}
	s.boot = r
	return r, nil
}

// renderTemplate renders one template (the bootstrap's Job, its command)
// as agent.yaml's are rendered, with data as its dot.
func (s *session) renderTemplate(ctx context.Context, name string, src []byte, data map[string]any) ([]byte, error) {
	o := s.templateOptions()
	o.Data = data
	out, err := render.RenderTemplate(ctx, name, src, o)
	if err != nil {
		return nil, s.templateErr(err)
	}
	return out, nil
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
		Env:        supervise.ChildEnv(os.Environ(), cred),
		Credential: cred,
		QuietArgs:  true,
		Grace:      s.Config.Run.Grace.Duration(),
		Logger:     s.log,
		Signals:    supervise.ForwardedSignals(),
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
