package agent

import (
	"context"
	"os"

	"github.com/kolla-agent/kolla-agent/probes"
)

// RunSidecar is `kolla-agent sidecar`: the steady-state duties for a
// service that another container of the pod runs. The service's process is
// found in the pod's shared PID namespace (shareProcessNamespace: true) by
// sidecar.process, and found again when it restarts. It runs until SIGTERM
// and exits 0.
func (a *Agent) RunSidecar(ctx context.Context, p *Plan) error {
	cfg := config0(p)
	var pids probes.PIDSource
	if m := cfg.Sidecar.Process; m.PIDFile != "" || m.Name != "" || m.Cmdline != "" {
		f, err := probes.NewFinder(probes.FinderConfig{PIDFile: m.PIDFile, Name: m.Name, Cmdline: m.Cmdline, Root: a.opts.Root})
		if err != nil {
			return configErr("%s: sidecar.process: %v", p.Source, err)
		}
		a.log.Info("sidecar: looking for the service's process", "match", f.Describe())
		a.metrics.restarts(f.Restarts)
		pids = f
	}
	_, err := a.steadyState(ctx, p, nil, nil, pids, probes.OSSpawner{}, os.Environ(), nil)
	return err
}
