package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/reload"
	"github.com/kolla-agent/kolla-agent/probes"
)

// runSidecar is `kolla-agent sidecar`: the steady-state duties for a
// service that another container of the pod runs. The service's process is
// found in the pod's shared PID namespace (shareProcessNamespace: true) by
// sidecar.process, and found again when it restarts. It runs until SIGTERM
// and exits 0.
func (s *session) runSidecar(ctx context.Context) error {
	cfg := s.Config
	if err := s.checkDirs(cfg); err != nil {
		return err
	}
	h := &serviceHandle{spawner: probes.OSSpawner{}, env: os.Environ()}
	// pids stays a nil interface without sidecar.process: a nil *Finder in
	// it would pass every "is there a process" test and crash the checks.
	if m := cfg.Sidecar.Process; m.PIDFile != "" || m.Name != "" || m.Cmdline != "" {
		f, err := probes.NewFinder(probes.FinderConfig{PIDFile: m.PIDFile, Name: m.Name, Cmdline: m.Cmdline, Root: s.opts.Root})
		if err != nil {
			return configErr("%s: sidecar.process: %v", s.Source, err)
		}
		s.log.Info("sidecar: looking for the service's process", "match", f.Describe())
		s.metrics.restarts(f.Restarts)
		// The reload: the config another container's service reads (a
		// shared volume), signalled or restarted through its found process.
		fs := foundService{pids: f, log: s.log}
		h.pids, h.found, h.signal, h.restart = f, f, fs, fs.Restart
	} else if cfg.Reload != nil {
		return configErr("%s: reload in sidecar mode needs sidecar.process, to find the service to signal", s.Source)
	}
	st, err := s.newSteady(h)
	if err != nil {
		return err
	}
	_, err = st.run(ctx)
	return err
}

// foundService is the service of another container, found in the shared
// PID namespace: signalled directly; restarted by SIGTERM, after which the
// kubelet starts its container again (a container restart).
type foundService struct {
	pids foundProcess
	log  *slog.Logger
}

// foundProcess is the service's process of another container (a Finder):
// Restarts counts the processes found in its place after the first, told
// apart by pid and start time.
type foundProcess interface {
	probes.PIDSource
	Restarts() int
}

func (f foundService) PID() int { return f.pids.PID() }

func (f foundService) Signal(_ context.Context, sig syscall.Signal) error {
	pid := f.pids.PID()
	if pid == 0 {
		return reload.ErrNoService
	}
	f.log.Info("signalling the service", "signal", sig.String(), "pid", pid)
	return syscall.Kill(pid, sig)
}

// Restart sends SIGTERM and returns once another process is found.
func (f foundService) Restart(ctx context.Context) error {
	before := f.pids.Restarts()
	if err := f.Signal(ctx, syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the service did not come back: %w", ctx.Err())
		case <-t.C:
			if f.pids.PID() != 0 && f.pids.Restarts() > before {
				return nil
			}
		}
	}
}
