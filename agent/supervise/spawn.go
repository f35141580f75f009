package supervise

import (
	"errors"
	"os"
	"syscall"
)

// errNotRunning: helpers can be started only while Run reaps.
var errNotRunning = errors.New("supervise: the service is not running, so nothing reaps helper processes")

// Start starts a helper process (an exec check) whose end is collected by
// Run's reap loop and handed over on done, since under Run nothing else may
// wait for a child. It fails when Run is not running.
//
// A helper runs as the service does (Config.Credential) unless attr sets a
// credential of its own: an exec check or a reload validator is the
// service's code and must not get the agent's root or its files.
//
// The registry lock is held across the fork: the reap loop takes it before
// it looks a reaped pid up, so a helper that ends at once is never reaped
// before it is registered.
func (s *Supervisor) Start(argv []string, attr *os.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	if !s.reaping {
		return 0, nil, errNotRunning
	}
	if cred := s.credential(); cred != nil && (attr.Sys == nil || attr.Sys.Credential == nil) {
		a := *attr
		sys := syscall.SysProcAttr{}
		if attr.Sys != nil {
			sys = *attr.Sys
		}
		sys.Credential = cred
		a.Sys = &sys
		attr = &a
	}
	p, err := os.StartProcess(argv[0], argv, attr)
	if err != nil {
		return 0, nil, err
	}
	pid := p.Pid    // Release sets p.Pid to -1
	_ = p.Release() // the reap loop waits, not os.Process
	done := make(chan syscall.WaitStatus, 1)
	s.spawned[pid] = done
	return pid, done, nil
}

// handOver gives a reaped helper's status to its Start caller; false if pid
// was not a helper.
func (s *Supervisor) handOver(pid int, ws syscall.WaitStatus) bool {
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	ch, ok := s.spawned[pid]
	if ok {
		delete(s.spawned, pid)
		ch <- ws
	}
	return ok
}

// setReaping opens or closes Start. Closing it kills and collects the
// helpers still running, so that no caller of Start waits forever.
func (s *Supervisor) setReaping(on bool) {
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	s.reaping = on
	if on {
		close(s.running)
		return
	}
	for pid, ch := range s.spawned {
		if pid <= 1 {
			continue // never kill(-1) or a group of init
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		ch <- ws
		delete(s.spawned, pid)
	}
}

// PID is the service's pid while it runs, 0 before it starts and once it
// has ended.
func (s *Supervisor) PID() int { return int(s.pid.Load()) }

// Running is closed once the service has started and Start may be used.
func (s *Supervisor) Running() <-chan struct{} { return s.running }
