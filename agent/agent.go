// Package agent is the lifecycle of one pod's agent: it chooses the config
// (agent.yaml, kubernetes-entrypoint variables, or the embedded default),
// builds the means each duty needs (DNS, the API), runs the duties in order,
// and reports a failure where an operator looks: the log, the termination
// message and an Event on the pod. It is the only package that knows them all.
package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/entrypoint"
	"github.com/kolla-agent/kolla-agent/agent/kolla"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes"
	"github.com/kolla-agent/kolla-agent/redact"
)

// Options are the agent's inputs from the command line and environment.
type Options struct {
	// ConfigPath is an explicit --config (or KOLLA_AGENT_CONFIG); empty lets
	// the agent choose (see LoadPlan).
	ConfigPath string
	// Root prefixes every absolute path the agent reads or writes.
	Root                   string
	Kubeconfig             string
	DNSServer              string
	ClusterDomain          string
	TerminationMessagePath string
	// Timeout overrides the config's overall dependency timeout when > 0.
	Timeout time.Duration
	// Version is reported to the API server in the User-Agent.
	Version string
	// MetricsAddr, when set, serves /metrics there while the agent waits.
	MetricsAddr string

	Logger    *slog.Logger
	Stderr    io.Writer // the final summary goes here
	LookupEnv func(string) (string, bool)
}

// DefaultTerminationMessagePath is the kubelet's default.
const DefaultTerminationMessagePath = "/dev/termination-log"

// ConfigError is bad configuration or input: exit code 1.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(format string, args ...any) error {
	return &ConfigError{Err: fmt.Errorf(format, args...)}
}

// Plan is what the agent will do, resolved from one config source.
type Plan struct {
	// Source names the config the plan came from, for the log.
	Source       string
	Namespace    string
	PodName      string
	NodeName     string
	Dependencies []discovery.Dependency
	Timeout      time.Duration
	// Command is exec'd once the dependencies are ready (kubernetes-entrypoint's
	// COMMAND); nil means exit 0.
	Command                []string
	TerminationMessagePath string
	// Config is the agent.yaml the plan came from; in kubernetes-entrypoint
	// mode and for `wait`, an empty one. Never nil.
	Config *config.Config
	// ExplicitConfig: --config was given, which turns kolla mode off.
	ExplicitConfig bool
}

// Agent runs a Plan.
type Agent struct {
	opts Options
	log  *slog.Logger
	// registry holds every duty's metrics, served by --metrics-addr while
	// waiting and by the probe server in the steady state.
	registry *prometheus.Registry
	metrics  *agentMetrics
	// kube is the API client, made once for the wait and the steady state.
	kube *discovery.Kube
	// health is what the probe server answers with once it runs: the
	// agent's own before the service starts (gates: dependencies,
	// bootstrap), then the service's checks.
	health atomic.Pointer[probes.Health]
	// eventPod is the pod (namespace, name) Events about lookups go on,
	// once a plan names it.
	eventPod atomic.Pointer[podRef]
}

// session is one Plan carried out by the Agent: the agent's means with the
// plan bound once, so that no method takes it, and what one run resolves
// once for its later stages.
type session struct {
	*Agent
	*Plan
	// boot is the bootstrap, resolved once for the steps before the service
	// and those after the rollout.
	boot *bootstrap.Run
	// probes is the probe server, started before the wait (run, sidecar).
	probes *probeRun
	// rendered is the config the service starts with (run; nil in
	// sidecar mode).
	rendered *kolla.Output
}

func (a *Agent) bind(p *Plan) *session { return &session{Agent: a, Plan: p} }

// The commands, each carrying out one plan.

// Wait is `kolla-agent wait` and init mode: wait for the plan's dependencies.
func (a *Agent) Wait(ctx context.Context, p *Plan) error { return a.bind(p).wait(ctx) }

// Bootstrap is init mode's bootstrap, after Wait (see session.bootstrap).
func (a *Agent) Bootstrap(ctx context.Context, p *Plan) error { return a.bind(p).bootstrap(ctx) }

// RunService is `kolla-agent run [-- CMD...]` (see session.runService).
func (a *Agent) RunService(ctx context.Context, p *Plan, args []string) (int, error) {
	return a.bind(p).runService(ctx, args)
}

// RunSidecar is `kolla-agent sidecar` (see session.runSidecar).
func (a *Agent) RunSidecar(ctx context.Context, p *Plan) error { return a.bind(p).runSidecar(ctx) }

// Endpoints is `kolla-agent endpoints [--dry-run]` (see session.endpoints).
func (a *Agent) Endpoints(ctx context.Context, p *Plan, dryRun bool) ([]bootstrap.Change, error) {
	return a.bind(p).endpoints(ctx, dryRun)
}

// BootstrapCommand is `kolla-agent bootstrap -- CMD`, the bootstrap Job's
// container: run CMD, pass its output through, exit with its code, and on
// failure leave the reason in the termination message.
func (a *Agent) BootstrapCommand(ctx context.Context, p *Plan, args []string) (int, error) {
	if len(args) == 0 {
		return 0, configErr("bootstrap: no command: give it after --")
	}
	return a.bind(p).runCommand(ctx, args)
}

// Render is `kolla-agent render [--check|--dry-run]` (see session.render).
func (a *Agent) Render(ctx context.Context, p *Plan, mode RenderMode) (*kolla.Config, []render.Difference, error) {
	return a.bind(p).render(ctx, mode)
}

// New checks the options and fills defaults.
func New(o Options) *Agent {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	reg := prometheus.NewRegistry()
	// The standard Go and process series (go_goroutines, process_open_fds,
	// process_resident_memory_bytes): what a leak shows in first.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Agent{opts: o, log: o.Logger, registry: reg, metrics: newAgentMetrics(reg, o.Version)}
}

func (a *Agent) env(name string) string {
	v, _ := a.opts.LookupEnv(name)
	return v
}

// path maps an absolute path of the pod's filesystem under --root.
func (a *Agent) path(p string) string { return render.UnderRoot(a.opts.Root, p) }

// LoadPlan chooses the config: an explicit --config wins; else
// kubernetes-entrypoint's DEPENDENCY_* variables make the agent its drop-in;
// else agent.yaml at its default path; else the embedded default.
func (a *Agent) LoadPlan() (*Plan, error) {
	if a.opts.ConfigPath == "" && entrypoint.Present(a.opts.LookupEnv) {
		return a.entrypointPlan()
	}
	path, source, b, err := config.Read(a.opts.Root, a.opts.ConfigPath)
	if err != nil {
		return nil, configErr("%v", err)
	}
	var cfg *config.Config
	if b == nil {
		cfg, err = config.Default()
	} else {
		cfg, err = config.Parse(path, b)
	}
	if err != nil {
		return nil, configErr("%v", err)
	}
	deps, err := cfg.Deps()
	if err != nil {
		return nil, configErr("%s: %v", source, err)
	}
	p := &Plan{
		Config:                 cfg,
		ExplicitConfig:         a.opts.ConfigPath != "",
		Source:                 source,
		Namespace:              cfg.Namespace,
		PodName:                a.env("POD_NAME"),
		NodeName:               a.env("NODE_NAME"),
		Dependencies:           deps,
		Timeout:                cfg.Dependencies.Timeout.Duration(),
		TerminationMessagePath: cfg.TerminationMessagePath,
	}
	if p.Namespace == "" {
		p.Namespace = a.ownNamespace()
	}
	a.completePlan(p)
	return p, nil
}

func (a *Agent) entrypointPlan() (*Plan, error) {
	spec, err := entrypoint.Parse(a.opts.LookupEnv)
	if err != nil {
		return nil, configErr("kubernetes-entrypoint environment: %v", err)
	}
	for _, k := range spec.Ignored {
		a.log.Debug("kubernetes-entrypoint environment: a key the agent does not read is ignored", "where", k)
	}
	p := &Plan{
		Source:       "kubernetes-entrypoint environment",
		Namespace:    spec.Namespace,
		PodName:      spec.PodName,
		NodeName:     a.env("NODE_NAME"),
		Dependencies: spec.Dependencies,
		// kubernetes-entrypoint waits for ever: an init container that
		// gave up would be restarted with the kubelet's back-off (up to
		// 5 min) and start that much later once the dependency is met.
		Timeout: 0,
		Command: spec.Command,
	}
	a.completePlan(p)
	return p, nil
}

// WaitPlan is the plan of `kolla-agent wait DEP...`.
func (a *Agent) WaitPlan(args []string) (*Plan, error) {
	if len(args) == 0 {
		return nil, configErr("wait: no dependencies given")
	}
	p := &Plan{Source: "command line", PodName: a.env("POD_NAME"), NodeName: a.env("NODE_NAME"), Timeout: config.DefaultTimeout}
	for i, arg := range args {
		d, err := discovery.Parse(arg)
		if err != nil {
			return nil, configErr("argument %d: %v", i+1, err)
		}
		p.Dependencies = append(p.Dependencies, d)
	}
	p.Namespace = a.ownNamespace()
	a.completePlan(p)
	return p, nil
}

// completePlan applies what every plan shares, whatever its source: the
// command line's timeout and termination-message path, their defaults, and
// an empty agent.yaml where the plan has none.
func (a *Agent) completePlan(p *Plan) {
	if p.Config == nil {
		p.Config = config.Empty()
	}
	if a.opts.Timeout > 0 {
		p.Timeout = a.opts.Timeout
	}
	if a.opts.TerminationMessagePath != "" {
		p.TerminationMessagePath = a.opts.TerminationMessagePath
	}
	if p.TerminationMessagePath == "" {
		p.TerminationMessagePath = DefaultTerminationMessagePath
	}
}

// ownNamespace: NAMESPACE or POD_NAMESPACE (downward API), else the service
// account's namespace file, else "default".
func (a *Agent) ownNamespace() string {
	for _, v := range []string{"NAMESPACE", "POD_NAMESPACE"} {
		if ns := a.env(v); ns != "" {
			return ns
		}
	}
	if b, err := os.ReadFile(a.path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// restConfig: --kubeconfig or KUBECONFIG outside a cluster, the service
// account inside one; nil (and no error) when there is neither.
func (a *Agent) restConfig() (*rest.Config, error) {
	path := a.opts.Kubeconfig
	if path == "" {
		path = a.env("KUBECONFIG")
	}
	var cfg *rest.Config
	var err error
	switch {
	case path != "":
		if cfg, err = discovery.LoadKubeconfig(path); err != nil {
			return nil, configErr("kubeconfig %s: %v", path, err)
		}
	case a.env("KUBERNETES_SERVICE_HOST") != "":
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, configErr("in-cluster config: %v", err)
		}
	default:
		return nil, nil
	}
	cfg.UserAgent = "kolla-agent/" + a.opts.Version
	return cfg, nil
}

// resolver builds the DNS resolver: resolv.conf as the pod sees it, with the
// --dns-server and --cluster-domain overrides.
func (a *Agent) resolver(ns string) (*discovery.Resolver, error) {
	server := a.opts.DNSServer
	if server == "" {
		server = a.env("KOLLA_AGENT_DNS_SERVER")
	}
	domain := a.opts.ClusterDomain
	if domain == "" {
		domain = a.env("CLUSTER_DOMAIN")
	}
	cfg, err := discovery.LoadResolvConf(a.path("/etc/resolv.conf"))
	if err != nil && server == "" {
		return nil, configErr("DNS: %v (or give --dns-server)", err)
	}
	if server != "" {
		cfg.Servers = []string{server}
	}
	if domain != "" {
		cfg.ClusterDomain = domain
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	cfg.Namespace = ns
	r, err := discovery.NewResolver(cfg)
	if err != nil {
		return nil, configErr("DNS: %v", err)
	}
	return r, nil
}

// wait waits for the plan's dependencies. On failure it writes the reason to
// the termination message path and posts it as an Event on the pod, and it
// always prints the final state of every dependency.
func (s *session) wait(ctx context.Context) error {
	timeout := s.Timeout.String()
	if s.Timeout == 0 {
		timeout = "none"
	}
	s.log.Info("waiting for dependencies", "config", s.Source, "count", len(s.Dependencies), "timeout", timeout, "namespace", s.Namespace)
	if len(s.Dependencies) == 0 {
		return nil
	}
	cfg, err := s.discoveryConfig(s.Dependencies)
	if err != nil {
		return err
	}
	cfg.Registerer = s.registry // also served by the probe server later
	if s.opts.MetricsAddr != "" {
		stop, err := s.serveMetrics(s.opts.MetricsAddr, s.registry)
		if err != nil {
			return err
		}
		defer stop()
	}
	w, err := discovery.New(cfg)
	if err != nil {
		return &ConfigError{Err: err}
	}
	start := time.Now()
	err = w.Run(ctx)
	s.summary(w.Results())
	if err == nil {
		s.log.Info("all dependencies ready", "took", time.Since(start).Round(time.Millisecond).String())
		return nil
	}
	s.reportFailure(cfg.Kube, "DependencyWaitFailed", err)
	return err
}

// discoveryConfig gives discovery the means deps need: DNS when one is a
// dns: dependency, the API when there is a kubeconfig or a service account
// (required when one needs it).
func (s *session) discoveryConfig(deps []discovery.Dependency) (discovery.Config, error) {
	cfg := discovery.Config{
		Dependencies: deps,
		Timeout:      s.Timeout,
		Namespace:    s.Namespace,
		PodName:      s.PodName,
		NodeName:     s.NodeName,
		Public:       s.publicAddresses(),
		Logger:       s.log,
	}
	var needDNS, needAPI bool
	for _, d := range deps {
		needDNS = needDNS || d.Kind == discovery.KindDNS
		needAPI = needAPI || d.Kind.NeedsAPI()
	}
	if needDNS {
		r, err := s.resolver(s.Namespace)
		if err != nil {
			return cfg, err
		}
		cfg.DNS = r
	}
	kube, err := s.kubeClient()
	if err != nil && !needAPI {
		// A pod without a token (automountServiceAccountToken: false)
		// waiting for ports or names: as outside a cluster.
		s.log.Debug("no Kubernetes API client; no dependency needs one", "error", err.Error())
		kube, err = nil, nil
	}
	if err != nil {
		return cfg, configErr("dependency %s needs the Kubernetes API: %v", firstAPIDependency(deps), err)
	}
	cfg.Kube = kube
	if s.PodName != "" {
		s.eventPod.Store(&podRef{s.Namespace, s.PodName})
	}
	if kube == nil && needAPI {
		return cfg, configErr("dependency %s needs the Kubernetes API, but there is no service-account token and no --kubeconfig/KUBECONFIG", firstAPIDependency(deps))
	}
	return cfg, nil
}

func firstAPIDependency(deps []discovery.Dependency) string {
	for _, d := range deps {
		if d.Kind.NeedsAPI() {
			return d.String()
		}
	}
	return ""
}

// kubeClient is the agent's one API client, nil when there is no
// kubeconfig and no service account.
func (a *Agent) kubeClient() (*discovery.Kube, error) {
	if a.kube != nil {
		return a.kube, nil
	}
	rc, err := a.restConfig()
	if err != nil || rc == nil {
		return nil, err
	}
	if a.kube, err = discovery.NewKube(rc, a.log); err != nil {
		return nil, configErr("kubernetes client: %v", err)
	}
	a.kube.OnRefused = a.refusedEvent
	if a.registry != nil {
		if err := a.kube.Register(a.registry); err != nil {
			return nil, err
		}
	}
	return a.kube, nil
}

// summary prints the final state of every dependency, one line each.
func (a *Agent) summary(rs []discovery.Result) {
	tw := tabwriter.NewWriter(a.opts.Stderr, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEPENDENCY\tSTATE\tWAITED\tDETAIL")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Dependency, r.State, r.Waited.Round(time.Millisecond), r.Detail)
	}
	tw.Flush()
}

// refusedEvent puts a lookup's refused verb and its workaround on the pod
// as a Warning Event, where `kubectl describe pod` shows it. A Role without
// create on events (helm-toolkit's) makes it a debug line: the warning is
// in the log already.
func (a *Agent) refusedEvent(msg string) {
	pod := a.eventPod.Load()
	if pod == nil || a.kube == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := postEvent(ctx, a.kube, *pod, event{"Warning", "APIVerbRefused", msg}); err != nil {
			a.log.Debug("could not post the refusal as an Event", "error", err.Error())
		}
	}()
}

// reportFailure tells the operator why the pod stops, where `kubectl
// describe pod` shows it: the termination message and an Event.
func (s *session) reportFailure(kube *discovery.Kube, reason string, err error) {
	msg := err.Error()
	s.writeTerminationMessage(msg)
	if eerr := s.post(kube, event{"Warning", reason, msg}); eerr != nil {
		s.log.Warn("could not post the failure as an Event on the pod", "pod", s.Namespace+"/"+s.PodName, "error", eerr.Error())
	}
}

// ConfigFailed writes a configuration error to the termination message,
// as a failed wait is: `kubectl get pod` must say why the container exited
// 1 too. p is the plan when there is one (agent.yaml may name another
// path), nil when the config itself could not be read.
func (a *Agent) ConfigFailed(p *Plan, err error) {
	if p == nil {
		p = &Plan{TerminationMessagePath: a.opts.TerminationMessagePath, Config: config.Empty()}
		if p.TerminationMessagePath == "" {
			p.TerminationMessagePath = DefaultTerminationMessagePath
		}
	}
	a.bind(p).writeTerminationMessage("bad configuration: " + err.Error())
}

// writeTerminationMessage writes msg where the kubelet reads why the
// container stopped (at most 4096 bytes of it).
func (s *session) writeTerminationMessage(msg string) {
	if path := s.path(s.TerminationMessagePath); path != "" {
		if werr := os.WriteFile(path, []byte(truncate(redact.Text(msg), 4096)), 0o644); werr != nil {
			s.log.Debug("termination message not written", "path", path, "error", werr.Error())
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
