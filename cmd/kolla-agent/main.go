// Command kolla-agent makes an OpenStack pod on Kubernetes configure itself.
// This file only parses flags and the environment and maps outcomes to exit
// codes; the work is in package agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/kolla-agent/kolla-agent/redact"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/kolla-agent/kolla-agent/agent"
	"github.com/kolla-agent/kolla-agent/agent/entrypoint"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// version is stamped by the linker (-X main.version=...).
var version = "dev"

// Exit codes (DESIGN.md): 0 ok, 1 bad configuration or input, 2 a dependency
// wait timed out or failed.
const (
	exitOK     = 0
	exitConfig = 1
	exitWait   = 2
)

const usage = `kolla-agent: makes an OpenStack pod on Kubernetes configure itself.

Usage:
  kolla-agent [global flags] COMMAND [flags] [args]

Commands:
  init                 wait for the dependencies in agent.yaml (or the
                       kubernetes-entrypoint DEPENDENCY_* variables), then exit
  wait [--timeout D] DEP...
                       wait for the given dependencies, then exit
  render [--check | --dry-run]
                       render kolla's config.json (in kolla mode) and the
                       templates of agent.yaml; --check: exit 1 listing what
                       differs on disk; --dry-run: list what would change
  run [-- CMD...]      wait, render, then run the service (CMD, run.command of
                       agent.yaml, or kolla's command), or kolla's bootstrap or
                       upgrade command when KOLLA_BOOTSTRAP/KOLLA_UPGRADE is set;
                       exits with the service's code (128+N if signal N killed it)
  endpoints [--dry-run]
                       make the Keystone catalog say where the service is
                       (bootstrap.endpoints): public URL from the Service's
                       exposure; print what changed
  bootstrap -- CMD...  the bootstrap Job's container: run CMD, pass its output
                       through, exit with its code; on failure write the
                       reason and the last output to the termination message
  sidecar              serve probes, reload and ship logs for a service that
                       another container of the pod runs, found in the shared
                       PID namespace by sidecar.process; runs until SIGTERM
  probe startup|readiness|liveness [--socket PATH] [--verbose]
                       ask the running agent over its Unix socket (exec
                       probes); exit 0 if the probe passes, 1 if not
  config check [--kolla-config PATH]
                       validate agent.yaml (--config), kolla's config.json
                       and the templates they name, touching nothing; print
                       every problem with its file and field (exit 1), or
                       what the agent would do
  config schema        print agent.yaml's JSON Schema (for editors)
  version              print the version

With no command and kubernetes-entrypoint variables (DEPENDENCY_*, COMMAND) set,
kolla-agent behaves as kubernetes-entrypoint: it waits, then execs COMMAND.

Dependencies (wait syntax, also used in agent.yaml):
  dns:NAME  tcp:HOST:PORT  http(s)://URL  file:PATH  socket:PATH
  service:[NS/]NAME  job:[NS/]NAME  job:[NS/]k=v,...  daemonset:[NS/]NAME
  pod:[NS/]k=v,...[@samenode]  container:NAME  exposed:[NS/]NAME
  resource:GROUP/VERSION/KIND/[NS/]NAME[?field.path=value][&condition=Type[=Status]]

Exit codes: 0 ok; 1 bad configuration or input; 2 a dependency or bootstrap
wait timed out or failed.

Global flags (also accepted after the command):
`

type globals struct {
	config, root, kubeconfig, dnsServer, clusterDomain, terminationLog string
	logFormat, logLevel, metricsAddr                                   string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.config, "config", g.config, "agent config `PATH` (env KOLLA_AGENT_CONFIG; default /etc/kolla-agent/agent.yaml)")
	fs.StringVar(&g.root, "root", g.root, "take every absolute path the agent reads or writes under `DIR` (tests, dry runs)")
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig `PATH` outside a cluster (env KUBECONFIG)")
	fs.StringVar(&g.dnsServer, "dns-server", g.dnsServer, "DNS server `HOST:PORT` instead of resolv.conf's (env KOLLA_AGENT_DNS_SERVER)")
	fs.StringVar(&g.clusterDomain, "cluster-domain", g.clusterDomain, "cluster `DOMAIN` instead of the one resolv.conf implies (env CLUSTER_DOMAIN)")
	fs.StringVar(&g.terminationLog, "termination-log", g.terminationLog, "where to write why the pod stopped (`PATH`; default /dev/termination-log)")
	fs.StringVar(&g.metricsAddr, "metrics-addr", g.metricsAddr, "serve Prometheus /metrics on `HOST:PORT` while waiting (default: off)")
	fs.StringVar(&g.logFormat, "log-format", g.logFormat, "log format: text or json")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "log level: debug, info, warn or error")
}

func main() {
	if err := notDumpable(); err != nil {
		// A seccomp profile may refuse prctl: the agent still does its job.
		fmt.Fprintln(os.Stderr, "kolla-agent: warning: cannot make itself undumpable (its /proc stays readable to its uid):", err)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	// The exec-probe client runs every few seconds in every pod: it parses
	// its own flags and touches nothing else (no logger, no config, no
	// Kubernetes client).
	if len(args) > 0 && args[0] == "probe" {
		return probe(args[1:], stdout, stderr)
	}
	g := globals{config: os.Getenv("KOLLA_AGENT_CONFIG"), logFormat: "text", logLevel: "info"}
	root := flag.NewFlagSet("kolla-agent", flag.ContinueOnError)
	root.SetOutput(stderr)
	g.register(root)
	root.Usage = func() {
		fmt.Fprint(stderr, usage)
		root.PrintDefaults()
	}
	if err := root.Parse(args); err != nil {
		return flagExit(err)
	}
	args = root.Args()
	cmd := ""
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}

	var timeout time.Duration
	var check, dryRun bool
	fs := flag.NewFlagSet("kolla-agent "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.register(fs)
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "kolla-agent", version)
		return exitOK
	case "wait":
		fs.DurationVar(&timeout, "timeout", 0, "overall timeout in Go syntax (default 10m)")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent wait [--timeout DURATION] DEP...\n\nWaits until every dependency is ready; exit 0, or 2 on timeout or failure.\n\n")
			fs.PrintDefaults()
		}
	case "init":
		fs.DurationVar(&timeout, "timeout", 0, "overall timeout, overriding the config's")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent init [flags]\n\nWaits for the dependencies in the config, then exits (or execs kubernetes-entrypoint's COMMAND).\n\n")
			fs.PrintDefaults()
		}
	case "render":
		fs.BoolVar(&check, "check", false, "compare the rendered files with the disk; exit 1 listing the differences")
		fs.BoolVar(&dryRun, "dry-run", false, "list what would change, writing nothing")
		fs.BoolVar(&dryRun, "diff", false, "same as --dry-run")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent render [--check | --dry-run]\n\n")
			fs.PrintDefaults()
		}
	case "run":
		fs.DurationVar(&timeout, "timeout", 0, "overall dependency timeout, overriding the config's")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent run [flags] [-- CMD...]\n\nWaits, renders, then runs the service and exits with its code.\n\n")
			fs.PrintDefaults()
		}
	case "endpoints":
		fs.BoolVar(&dryRun, "dry-run", false, "print what would change, writing nothing")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent endpoints [--dry-run]\n\nMakes the Keystone catalog say where the service is (bootstrap.endpoints of agent.yaml) and prints what changed.\n\n")
			fs.PrintDefaults()
		}
	case "bootstrap":
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent bootstrap [flags] -- CMD...\n\nRuns the bootstrap command (a bootstrap Job's container) and exits with its code.\n\n")
			fs.PrintDefaults()
		}
	case "sidecar":
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent sidecar [flags]\n\nServes the probes, reload and log shipping of agent.yaml for a service another container runs; runs until SIGTERM.\n\n")
			fs.PrintDefaults()
		}
	case "":
		if g.config != "" || !entrypoint.Present(os.LookupEnv) {
			root.Usage()
			return exitConfig
		}
		cmd = "init" // kubernetes-entrypoint drop-in
	case "config":
		return configCommand(g, args, stdout, stderr)
	case "probe":
		// After global flags (`--config X probe readiness`): only --config
		// matters to the client, for probes.socket.
		if g.config != "" {
			args = append([]string{"--config", g.config}, args...)
		}
		return probe(args, stdout, stderr)
	case "help":
		root.Usage()
		return exitOK
	default:
		fmt.Fprintf(stderr, "kolla-agent: unknown command %q (try --help)\n", cmd)
		return exitConfig
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}

	logger, err := newLogger(stderr, g.logFormat, g.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "kolla-agent: %v\n", err)
		return exitConfig
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	a := agent.New(agent.Options{
		ConfigPath:             g.config,
		Root:                   g.root,
		Kubeconfig:             g.kubeconfig,
		DNSServer:              g.dnsServer,
		ClusterDomain:          g.clusterDomain,
		TerminationMessagePath: g.terminationLog,
		Timeout:                timeout,
		Version:                version,
		MetricsAddr:            g.metricsAddr,
		Logger:                 logger,
		Stderr:                 stderr,
	})
	var plan *agent.Plan
	switch {
	case cmd == "wait":
		plan, err = a.WaitPlan(fs.Args())
	case cmd != "run" && cmd != "bootstrap" && fs.NArg() > 0:
		fmt.Fprintf(stderr, "kolla-agent %s: unexpected arguments %q\n", cmd, fs.Args())
		return exitConfig
	default:
		plan, err = a.LoadPlan()
	}
	if err != nil {
		return exitCode(logger, a, plan, err)
	}
	switch cmd {
	case "render":
		return render(ctx, a, plan, check, dryRun, stdout, logger)
	case "run":
		code, err := a.RunService(ctx, plan, fs.Args())
		if err != nil {
			return exitCode(logger, a, plan, err)
		}
		return code
	case "endpoints":
		changes, err := a.Endpoints(ctx, plan, dryRun)
		for _, c := range changes {
			prefix := ""
			if dryRun {
				prefix = "would "
			}
			fmt.Fprintln(stdout, prefix+c.String())
		}
		if err == nil && len(changes) == 0 {
			fmt.Fprintln(stdout, "the catalog is up to date")
		}
		return exitCode(logger, a, plan, err)
	case "bootstrap":
		code, err := a.BootstrapCommand(ctx, plan, fs.Args())
		if err != nil && code == 0 {
			return exitCode(logger, a, plan, err)
		}
		return code
	case "sidecar":
		return exitCode(logger, a, plan, a.RunSidecar(ctx, plan))
	}
	err = a.Wait(ctx, plan)
	if err == nil {
		err = a.Bootstrap(ctx, plan)
	}
	if err == nil && len(plan.Command) > 0 {
		err = agent.Exec(plan.Command)
	}
	return exitCode(logger, a, plan, err)
}

func render(ctx context.Context, a *agent.Agent, plan *agent.Plan, check, dryRun bool, stdout io.Writer, log *slog.Logger) int {
	mode := agent.RenderApply
	switch {
	case check && dryRun:
		log.Error("bad configuration", "error", "--check and --dry-run exclude each other")
		return exitConfig
	case check:
		mode = agent.RenderCheck
	case dryRun:
		mode = agent.RenderDryRun
	}
	_, diffs, err := a.Render(ctx, plan, mode)
	if err != nil {
		return exitCode(log, a, plan, err)
	}
	for _, d := range diffs {
		fmt.Fprintf(stdout, "%s: %s (want %s, have %s)\n", d.Path, d.What, d.Want, d.Got)
	}
	if check && len(diffs) > 0 {
		return exitConfig
	}
	return exitOK
}

// exitCode logs err and maps it to the exit code; a configuration error
// also goes to the termination message (a is nil where there is no agent).
func exitCode(log *slog.Logger, a *agent.Agent, p *agent.Plan, err error) int {
	var cerr *agent.ConfigError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &cerr):
		log.Error("bad configuration", "error", err.Error())
		if a != nil {
			a.ConfigFailed(p, err)
		}
		return exitConfig
	case errors.Is(err, bootstrap.ErrFailed), errors.Is(err, bootstrap.ErrTimeout):
		log.Error("bootstrap failed", "error", err.Error())
		return exitWait
	case errors.Is(err, discovery.ErrFailed), errors.Is(err, discovery.ErrTimeout):
		log.Error("dependency wait failed", "error", err.Error())
		return exitWait
	default:
		log.Error("failed", "error", err.Error())
		return exitWait
	}
}

func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitConfig
}

// newLogger builds the process logger and routes client-go's klog into it:
// at debug level client-go's own lines (retries, Retry-After) show;
// otherwise the agent reports API trouble itself, once per change, and
// klog's per-retry lines are noise.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	// Every line passes redaction: a URL's password, NAME=secret.
	logger := slog.New(redact.Handler(h))
	if lv <= slog.LevelDebug {
		klog.SetSlogLogger(logger.With("component", "client-go"))
	} else {
		klog.SetLogger(logr.Discard())
	}
	return logger, nil
}
