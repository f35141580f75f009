package probes

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// Means are what the checks of agent.yaml need of the agent and of the
// service they check.
type Means struct {
	// PIDs is the service's main process; nil when there is none (a
	// service the agent does not supervise, a sidecar without
	// sidecar.process).
	PIDs PIDSource
	// Spawner starts exec checks (the service's reaper under run), in Env.
	Spawner Spawner
	Env     []string
	// Argv is the service's command line, where an rpc check finds the
	// files the service reads; nil when the agent does not start it.
	Argv []string
	// Sidecar: the service runs in another container, so its process can
	// vanish and come back; a liveness "process" check is added unless the
	// checks have one.
	Sidecar bool
	// Root is the agent's --root, under which the pod's paths are read.
	Root string
	// Dependencies follows the dependencies of dependency checks; nil when
	// there is none to follow (see Dependencies).
	Dependencies *discovery.Waiter
	Logger       *slog.Logger
}

// SpecsFrom turns agent.yaml's probes.checks into specs. What only shows
// when a check is built (a CA file, an rpc check's config) is an error
// that names the field (probes.checks[2].rpc: ...).
func SpecsFrom(checks []config.Check, m Means) ([]Spec, error) {
	if m.Logger == nil {
		m.Logger = slog.New(slog.DiscardHandler)
	}
	var specs []Spec
	hasProcess := false
	for i := range checks {
		ch := &checks[i]
		f := fmt.Sprintf("probes.checks[%d]", i)
		c, err := checkerFrom(ch, f, m)
		if err != nil {
			return nil, err
		}
		hasProcess = hasProcess || ch.Process != nil
		var ps []Probe
		for _, n := range ch.ProbeList() {
			p, err := ParseProbe(n)
			if err != nil {
				return nil, fmt.Errorf("%s.probes: %v", f, err)
			}
			ps = append(ps, p)
		}
		specs = append(specs, Spec{
			Name: ch.Name, Probes: ps, Period: ch.Period.Duration(), Timeout: ch.Timeout.Duration(),
			FailureThreshold: ch.FailureThreshold, SuccessThreshold: ch.SuccessThreshold, Checker: c,
		})
	}
	if m.Sidecar && !hasProcess && m.PIDs != nil {
		specs = append(specs, Spec{
			Name: "process", Probes: []Probe{Liveness},
			Period: 2 * time.Second, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 1,
			Checker: NewProcess(m.PIDs),
		})
	}
	return specs, nil
}

// checkerFrom builds the checker of ch, the check at field f.
func checkerFrom(ch *config.Check, f string, m Means) (Checker, error) {
	path := func(p string) string { return render.UnderRoot(m.Root, p) }
	needPID := func(what string) error {
		if m.PIDs == nil {
			return fmt.Errorf("%s.%s: there is no service process to check: in `run` the agent must supervise it (run.supervise), in `sidecar` give sidecar.process", f, what)
		}
		return nil
	}
	switch {
	case ch.Process != nil:
		if err := needPID("process"); err != nil {
			return nil, err
		}
		return NewProcess(m.PIDs), nil
	case ch.Connections != nil:
		if err := needPID("connections"); err != nil {
			return nil, err
		}
		min := ch.Connections.Min
		if min == 0 {
			min = 1
		}
		return NewConnections(m.PIDs, ch.Connections.Ports, min), nil
	case ch.TCP != nil:
		return NewTCP(ch.TCP.Address), nil
	case ch.HTTP != nil:
		h := ch.HTTP
		c, err := NewHTTP(HTTPConfig{URL: h.URL, ExpectStatus: h.ExpectStatus, BodyRegex: h.BodyRegex,
			Host: h.Host, CAFile: path(h.CAFile), InsecureSkipVerify: h.InsecureSkipVerify})
		if err != nil {
			return nil, fmt.Errorf("%s.http: %v", f, err)
		}
		return c, nil
	case ch.Exec != nil:
		argv, err := ch.Exec.Command.Words()
		if err != nil {
			return nil, fmt.Errorf("%s.exec.command: %v", f, err)
		}
		return NewExec(argv, m.Spawner, m.Env), nil
	case ch.File != nil:
		return NewFile(ch.File.Path, ch.File.MaxAge.Duration()), nil
	case ch.Dependency != nil:
		d, err := discovery.Parse(ch.Dependency.Wait)
		if err != nil {
			return nil, fmt.Errorf("%s.dependency.wait: %v", f, err)
		}
		if m.Dependencies == nil {
			return nil, fmt.Errorf("%s.dependency: no means to check dependencies", f)
		}
		return NewDependency(d, m.Dependencies, m.Logger.With("check", ch.Name)), nil
	case ch.RPC != nil:
		r := ch.RPC
		var sources []OsloSource
		for _, p := range r.ConfigFiles {
			sources = append(sources, OsloSource{Path: path(p)})
		}
		for _, p := range r.ConfigDirs {
			sources = append(sources, OsloSource{Path: path(p), Dir: true})
		}
		if r.ConfigFile == "" && len(sources) == 0 && r.TransportURL == "" {
			// The files the service itself reads: from its command line,
			// else oslo.config's defaults for its name.
			exists := func(p string, dir bool) bool {
				fi, err := os.Stat(path(p))
				return err == nil && fi.IsDir() == dir
			}
			for _, src := range OsloSourcesOf(m.Argv, exists) {
				src.Path = path(src.Path)
				sources = append(sources, src)
			}
			switch {
			case len(sources) > 0:
			case m.Argv == nil:
				return nil, fmt.Errorf("%s.rpc: give configFile, configFiles, configDirs or transportURL (the agent does not start the service here, so it has no command line to read them from)", f)
			default:
				return nil, fmt.Errorf("%s.rpc: give configFile, configFiles, configDirs or transportURL: the service's command line has no --config-file or --config-dir, and none of oslo.config's default files for %s exists (/etc/PROJECT/NAME.conf, /etc/NAME.conf)", f, filepath.Base(m.Argv[0]))
			}
		}
		c, err := NewRPC(RPCConfig{
			ConfigFile: path(r.ConfigFile), Sources: sources, TransportURL: r.TransportURL, Topic: r.Topic, Server: r.Server,
			Exchange: r.Exchange, Method: r.Method, Namespace: r.Namespace, Version: r.Version,
			Logger: m.Logger.With("check", ch.Name),
		})
		if err != nil {
			return nil, fmt.Errorf("%s.rpc: %v", f, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%s: no check type", f)
}

// Dependencies are the dependencies that checks follow, for building one
// discovery.Waiter (and its means) for all of them. One that does not
// parse is left to SpecsFrom, which names its field.
func Dependencies(checks []config.Check) []discovery.Dependency {
	var deps []discovery.Dependency
	for _, ch := range checks {
		if ch.Dependency != nil {
			if d, err := discovery.Parse(ch.Dependency.Wait); err == nil {
				deps = append(deps, d)
			}
		}
	}
	return deps
}

// Listeners are where the probe server listens, from agent.yaml's probes:
// section: the TCP address for the kubelet and the Unix socket of
// `kolla-agent probe`. Each is defaulted when there are checks; "" is
// none ("off", or not given without checks).
func Listeners(pc *config.Probes) (address, socket string) {
	listener := func(v, def string) string {
		switch {
		case v == "off":
			return ""
		case v != "":
			return v
		case len(pc.Checks) > 0:
			return def
		}
		return ""
	}
	return listener(pc.Address, config.DefaultProbeAddress), listener(pc.Socket, config.DefaultProbeSocket)
}
