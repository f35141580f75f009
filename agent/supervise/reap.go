package supervise

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// reap collects every child that has ended, the main child or any orphan
// re-parented to the agent, without blocking: SIGCHLD says when to call it
// again. The loop is written here rather than borrowed because a library
// reaper (or exec.Cmd.Wait) would be a second waiter racing this one.
func (l *loop) reap() error {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			if !l.exited {
				// The main child is gone, yet this loop never saw it end.
				return fmt.Errorf("supervise: pid %d was reaped by another waiter in this process: nothing but Run may wait for children", l.pid)
			}
			return nil
		case err != nil:
			// Unexpected, and not the service's fault: keep supervising;
			// the next SIGCHLD retries.
			l.s.log.Error("wait4 failed", "err", err)
			return nil
		case pid == 0:
			return nil
		case pid == l.pid:
			l.exited, l.status = true, ws
			l.s.pid.Store(0)
			l.s.log.Info("main process ended", "pid", pid, "exit_code", statusCode(ws), "status", describe(ws))
		case l.s.handOver(pid, ws):
		default:
			l.s.log.Debug("reaped", "pid", pid, "status", describe(ws))
		}
	}
}

// becomeSubreaper makes orphans of the service's tree come to the agent when
// it is not PID 1 (a test, a sidecar), so that they are reaped here as they
// would be in a container. A failure only means orphans go to the real init.
func becomeSubreaper(log *slog.Logger) {
	if os.Getpid() == 1 {
		return
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become a child subreaper; orphans will be reaped by init instead", "err", err)
	}
}

// statusCode is the code a shell reports: the exit status, or 128+N for a
// death by signal N.
func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Signaled() && ws.CoreDump():
		return "killed by " + unix.SignalName(ws.Signal()) + " (core dumped)"
	case ws.Signaled():
		return "killed by " + unix.SignalName(ws.Signal())
	default:
		return fmt.Sprintf("exited with %d", ws.ExitStatus())
	}
}
