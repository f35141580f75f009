package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes"
)

// checkSpecs turns probes.checks into the probes package's specs. In
// sidecar mode, where the service's process can vanish and come back, a
// liveness "process" check is added unless the config has its own.
func (s *session) checkSpecs(h *serviceHandle, deps *discovery.Waiter) ([]probes.Spec, error) {
	cfg, sidecar := s.Config, h.svc == nil
	var specs []probes.Spec
	hasProcess := false
	for i := range cfg.Probes.Checks {
		ch := &cfg.Probes.Checks[i]
		f := fmt.Sprintf("probes.checks[%d]", i)
		c, err := s.checker(ch, f, h, deps)
		if err != nil {
			return nil, err
		}
		hasProcess = hasProcess || ch.Process != nil
		var ps []probes.Probe
		for _, n := range ch.ProbeList() {
			p, err := probes.ParseProbe(n)
			if err != nil {
				return nil, fmt.Errorf("%s.probes: %v", f, err)
			}
			ps = append(ps, p)
		}
		specs = append(specs, probes.Spec{
			Name: ch.Name, Probes: ps, Period: ch.Period.Duration(), Timeout: ch.Timeout.Duration(),
			FailureThreshold: ch.FailureThreshold, SuccessThreshold: ch.SuccessThreshold, Checker: c,
		})
	}
	if sidecar && !hasProcess && h.pids != nil {
		specs = append(specs, probes.Spec{
			Name: "process", Probes: []probes.Probe{probes.Liveness},
			Period: 2 * time.Second, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 1,
			Checker: probes.NewProcess(h.pids),
		})
	}
	return specs, nil
}

func (s *session) checker(ch *config.Check, f string, h *serviceHandle, deps *discovery.Waiter) (probes.Checker, error) {
	needPID := func(what string) error {
		if h.pids == nil {
			return fmt.Errorf("%s.%s: there is no service process to check: in `run` the agent must supervise it (run.supervise), in `sidecar` give sidecar.process", f, what)
		}
		return nil
	}
	switch {
	case ch.Process != nil:
		if err := needPID("process"); err != nil {
			return nil, err
		}
		return probes.NewProcess(h.pids), nil
	case ch.Connections != nil:
		if err := needPID("connections"); err != nil {
			return nil, err
		}
		min := ch.Connections.Min
		if min == 0 {
			min = 1
		}
		return probes.NewConnections(h.pids, ch.Connections.Ports, min), nil
	case ch.TCP != nil:
		return probes.NewTCP(ch.TCP.Address), nil
	case ch.HTTP != nil:
		h := ch.HTTP
		c, err := probes.NewHTTP(probes.HTTPConfig{URL: h.URL, ExpectStatus: h.ExpectStatus, BodyRegex: h.BodyRegex,
			Host: h.Host, CAFile: s.path(h.CAFile), InsecureSkipVerify: h.InsecureSkipVerify})
		if err != nil {
			return nil, fmt.Errorf("%s.http: %v", f, err)
		}
		return c, nil
	case ch.Exec != nil:
		argv, err := ch.Exec.Command.Words()
		if err != nil {
			return nil, fmt.Errorf("%s.exec.command: %v", f, err)
		}
		return probes.NewExec(argv, h.spawner, h.env), nil
	case ch.File != nil:
		return probes.NewFile(ch.File.Path, ch.File.MaxAge.Duration()), nil
	case ch.Dependency != nil:
		d, err := discovery.Parse(ch.Dependency.Wait)
		if err != nil {
			return nil, fmt.Errorf("%s.dependency.wait: %v", f, err)
		}
		if deps == nil {
			return nil, fmt.Errorf("%s.dependency: no means to check dependencies", f)
		}
		return probes.NewDependency(d, deps, s.log.With("check", ch.Name)), nil
	case ch.RPC != nil:
		r := ch.RPC
		var sources []probes.OsloSource
		for _, p := range r.ConfigFiles {
			sources = append(sources, probes.OsloSource{Path: s.path(p)})
		}
		for _, p := range r.ConfigDirs {
			sources = append(sources, probes.OsloSource{Path: s.path(p), Dir: true})
		}
		if r.ConfigFile == "" && len(sources) == 0 && r.TransportURL == "" {
			// The files the service itself reads: from its command line,
			// else oslo.config's defaults for its name.
			exists := func(p string, dir bool) bool {
				fi, err := os.Stat(s.path(p))
				return err == nil && fi.IsDir() == dir
			}
			for _, src := range probes.OsloSourcesOf(h.argv, exists) {
				src.Path = s.path(src.Path)
				sources = append(sources, src)
			}
			switch {
			case len(sources) > 0:
			case h.argv == nil:
				return nil, fmt.Errorf("%s.rpc: give configFile, configFiles, configDirs or transportURL (the agent does not start the service here, so it has no command line to read them from)", f)
			default:
				return nil, fmt.Errorf("%s.rpc: give configFile, configFiles, configDirs or transportURL: the service's command line has no --config-file or --config-dir, and none of oslo.config's default files for %s exists (/etc/PROJECT/NAME.conf, /etc/NAME.conf)", f, filepath.Base(h.argv[0]))
			}
		}
		c, err := probes.NewRPC(probes.RPCConfig{
			ConfigFile: s.path(r.ConfigFile), Sources: sources, TransportURL: r.TransportURL, Topic: r.Topic, Server: r.Server,
			Exchange: r.Exchange, Method: r.Method, Namespace: r.Namespace, Version: r.Version,
			Logger: s.log.With("check", ch.Name),
		})
		if err != nil {
			return nil, fmt.Errorf("%s.rpc: %v", f, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%s: no check type", f)
}

// dependencyChecks are the dependencies that checks follow, for building
// one discovery.Waiter (and its means) for all of them.
func dependencyChecks(cfg *config.Config) []discovery.Dependency {
	var deps []discovery.Dependency
	for _, ch := range cfg.Probes.Checks {
		if ch.Dependency != nil {
			if d, err := discovery.Parse(ch.Dependency.Wait); err == nil {
				deps = append(deps, d)
			}
		}
	}
	return deps
}
