package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/shlex"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// Means are what a Run takes from the agent that runs it.
type Means struct {
	// Kube is the API client; required.
	Kube      *discovery.Kube
	Namespace string
	// PodName is POD_NAME: the pod whose condition is set (podCondition),
	// and wait mode's; "" outside a pod.
	PodName string
	// Identity names this replica (the Lease holder, a Job's creator, the
	// pod whose images make the version): POD_NAME, else the hostname.
	Identity string
	// Root is --root: the Job's template and the inputs are read under it.
	Root string
	// Source names the config in errors.
	Source     string
	Logger     *slog.Logger
	Registerer prometheus.Registerer

	// Render renders a template (the Job's, lease mode's command) as the
	// agent renders its own, with data as its dot; its errors are the
	// agent's, returned as they are.
	Render func(ctx context.Context, name string, src []byte, data map[string]any) ([]byte, error)
	// Command runs lease mode's command in this pod: its exit code.
	Command func(ctx context.Context, argv []string) (int, error)
	// Gate holds the pod's readiness with a reason, or releases it ("");
	// nil: none.
	Gate func(reason string)
	// Event posts an Event (Normal, Warning) on the pod; nil: none.
	Event func(typ, reason, msg string) error
}

// InputError is bad input: agent.yaml's bootstrap: section, a file it
// names, the command it gives, or what the default version needs. Waiting
// will not mend it: the agent reports it as a configuration error.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErr(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// Run is agent.yaml's bootstrap: section with its version resolved: the
// steps before the service, and those after the rollout.
type Run struct {
	cfg     *config.Bootstrap
	m       Means
	coord   *Coordinator
	version string
}

// NewRun builds the coordinator and resolves the version: the configured
// one, else the content hash of what the bootstrap does and of its inputs.
func NewRun(ctx context.Context, cfg *config.Bootstrap, m Means) (*Run, error) {
	if m.Logger == nil {
		m.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Run{cfg: cfg, m: m}
	var err error
	r.coord, err = New(Config{
		Kube: m.Kube, Namespace: m.Namespace, Name: cfg.Name, PodName: m.Identity,
		Report: r.progress(), Logger: m.Logger, Registerer: m.Registerer,
	})
	if err != nil {
		return nil, &InputError{Err: err}
	}
	if r.version, err = r.resolveVersion(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Version is what the steps are recorded under.
func (r *Run) Version() string { return r.version }

// later reports whether phase waits for the rollout.
func (r *Run) later(phase string) bool {
	for _, ph := range r.cfg.Phases {
		if ph.Name == phase {
			return ph.Later()
		}
	}
	return false
}

// resolveVersion: the configured version, else the content hash of what
// the bootstrap does (create: the Job rendered without a phase; lease: the
// commands; wait: the Jobs waited for) and of the inputs.
func (r *Run) resolveVersion(ctx context.Context) (string, error) {
	if r.cfg.Version != "" {
		return r.cfg.Version, nil
	}
	inputs := map[string][]byte{}
	for i, path := range r.cfg.Inputs {
		data, err := os.ReadFile(render.UnderRoot(r.m.Root, path))
		if err != nil {
			return "", inputErr("%s: bootstrap.inputs[%d]: %v", r.m.Source, i, err)
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
		m, err := r.renderJob(ctx, Step{}, "")
		if err != nil {
			return "", err
		}
		what = m
		inputs["(commands)"] = []byte(strings.Join(parts, "\n"))
	case config.BootstrapLease, config.BootstrapWait:
		if r.cfg.Mode == config.BootstrapWait {
			parts = r.cfg.Jobs
		}
		images, err := r.coord.PodImages(ctx, r.m.Identity)
		if err != nil {
			return "", inputErr("%s: bootstrap: no version given, and the pod's images (which make the default version) cannot be read: %v; set bootstrap.version or POD_NAME", r.m.Source, err)
		}
		inputs["(commands)"] = []byte(strings.Join(append(parts, images...), "\n"))
	}
	v, err := Version(what, inputs)
	if err != nil {
		return "", inputErr("%s: bootstrap.job %s: %v", r.m.Source, r.cfg.Job, err)
	}
	return v, nil
}

// Steps are the steps before the service (later=false) or after the
// rollout (later=true).
func (r *Run) Steps(later bool) []Step {
	if len(r.cfg.Phases) == 0 {
		if later {
			return nil
		}
		return []Step{{Version: r.version}}
	}
	var out []Step
	for _, ph := range r.cfg.Phases {
		if ph.Later() == later {
			out = append(out, Step{Phase: ph.Name, Version: r.version})
		}
	}
	return out
}

// command is the step's command: the phase's, else bootstrap.command.
func (r *Run) command(s Step) string {
	for _, ph := range r.cfg.Phases {
		if ph.Name == s.Phase && ph.Command != "" {
			return ph.Command
		}
	}
	return r.cfg.Command
}

// Step runs one step in the configured mode. Bad input is an InputError,
// a Job the API would not accept ErrInvalid, a failed step ErrFailed, one
// that did not finish in time ErrTimeout.
func (r *Run) Step(ctx context.Context, s Step) error {
	switch r.cfg.Mode {
	case config.BootstrapCreate:
		m, err := r.renderJob(ctx, s, r.version)
		if err != nil {
			return err
		}
		al := r.cfg.Allow
		spec := JobSpec{Manifest: m, Source: r.cfg.Job, PermanentExitCodes: r.cfg.PermanentExitCodes,
			Allow: JobAllow{ServiceAccounts: al.ServiceAccounts, HostPaths: al.HostPaths, HostNamespaces: al.HostNamespaces, Privileged: al.Privileged, Capabilities: al.Capabilities}}
		if err := r.coord.CheckJob(spec, s); err != nil {
			return err
		}
		return r.coord.Create(ctx, s, spec, r.cfg.Retries)
	case config.BootstrapLease:
		// The command is a template too, so that, say, keystone-manage
		// bootstrap gets --bootstrap-public-url {{ publicURL ... }}.
		cmd, err := r.m.Render(ctx, "bootstrap.command", []byte(r.command(s)), nil)
		if err != nil {
			return err
		}
		argv, err := shlex.Split(string(cmd))
		if err != nil || len(argv) == 0 {
			return inputErr("%s: bootstrap.command %q: not a command", r.m.Source, cmd)
		}
		return r.coord.Lease(ctx, s, LeaseOptions{Duration: r.cfg.LeaseDuration.Duration()}, func(ctx context.Context) (int, error) {
			return r.m.Command(ctx, argv)
		})
	case config.BootstrapWait:
		deps, err := r.cfg.WaitJobs()
		if err != nil {
			return inputErr("%s: %v", r.m.Source, err)
		}
		return r.coord.Wait(ctx, s, strings.Join(r.cfg.Jobs, ", "), func(ctx context.Context) error {
			w, err := discovery.New(discovery.Config{Dependencies: deps, Namespace: r.m.Namespace, PodName: r.m.PodName, Kube: r.m.Kube, Logger: r.m.Logger})
			if err != nil {
				return &InputError{Err: err}
			}
			return w.Run(ctx)
		})
	}
	return inputErr("bootstrap.mode %q", r.cfg.Mode)
}

// renderJob renders the Job's template; the template sees
// .Bootstrap.{Name,Phase,Command,Version}. The version is "" while the
// version itself is being computed.
func (r *Run) renderJob(ctx context.Context, s Step, version string) ([]byte, error) {
	src, err := os.ReadFile(render.UnderRoot(r.m.Root, r.cfg.Job))
	if err != nil {
		return nil, inputErr("%s: bootstrap.job: %v", r.m.Source, err)
	}
	return r.m.Render(ctx, r.cfg.Job, src, map[string]any{"Bootstrap": map[string]any{
		"Name": r.cfg.Name, "Phase": s.Phase, "Command": r.command(s), "Version": version,
	}})
}

// progress logs each change of a step's state, posts the noteworthy ones
// as Events on the pod, and holds readiness while a step is not done.
func (r *Run) progress() func(Progress) {
	var last Progress
	return func(pr Progress) {
		if pr == last {
			return
		}
		last = pr
		attrs := []any{"step", pr.Step.String(), "state", string(pr.State), "detail", pr.Detail}
		if pr.State == Failed {
			r.m.Logger.Error("bootstrap", attrs...)
		} else {
			r.m.Logger.Info("bootstrap", attrs...)
		}
		// The phases after the rollout run while the pod serves: they
		// never hold its readiness.
		if !r.later(pr.Step.Phase) && r.m.Gate != nil {
			reason := ""
			if pr.State != Done {
				reason = pr.Step.String() + ": " + pr.Detail
			}
			r.m.Gate(reason)
		}
		if pr.Event != "" {
			typ := "Normal"
			if pr.State == Failed {
				typ = "Warning"
			}
			if err := r.event(typ, pr.Event, pr.Step.String()+": "+pr.Detail); err != nil {
				r.m.Logger.Debug("could not post an Event", "reason", pr.Event, "error", err.Error())
			}
		}
	}
}

func (r *Run) event(typ, reason, msg string) error {
	if r.m.Event == nil {
		return nil
	}
	return r.m.Event(typ, reason, msg)
}

// AfterRollout runs the phases that wait for the rollout (contract) beside
// the service: once every replica of the pod's Deployment or StatefulSet
// runs this version, whichever replica sees it first creates the step's Job
// (the others get AlreadyExists and watch it). A recorded phase is skipped;
// a newer rollout leaves the phase to the newer pods. A failure is
// reported (log, Event) but never stops the service.
func (r *Run) AfterRollout(ctx context.Context) {
	if r == nil {
		return
	}
	kind, name := r.cfg.OwnerRef()
	for _, st := range r.Steps(true) {
		if done, _ := r.coord.Recorded(ctx, st); done {
			continue
		}
		err := r.coord.WaitRollout(ctx, st, r.m.Identity, Owner{Kind: kind, Name: name})
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout.Duration())
			err = r.Step(sctx, st)
			cancel()
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrSuperseded):
			r.m.Logger.Info("a newer revision is rolling out; its pods run the later phases", "step", st.String(), "why", err.Error())
			return
		case err != nil:
			// Not the termination message: the container runs on, and a
			// later exit would be blamed on this.
			r.m.Logger.Error("bootstrap phase after the rollout failed; the service runs on", "step", st.String(), "error", err.Error())
			if eerr := r.event("Warning", "BootstrapFailed", err.Error()); eerr != nil {
				r.m.Logger.Debug("could not post an Event", "error", eerr.Error())
			}
			return
		}
	}
}

// MarkPod sets the pod condition kolla.openstack.org/bootstrapped when the
// config asks for it.
func (r *Run) MarkPod(ok bool, reason, msg string) {
	if r == nil || !r.cfg.PodCondition || r.m.PodName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.coord.SetPodCondition(ctx, r.m.PodName, ok, reason, msg); err != nil {
		r.m.Logger.Warn("could not set the pod condition "+ConditionBootstrapped, "error", err.Error())
	}
}
