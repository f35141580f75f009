package probes

import (
	"context"
	"os"
	"syscall"
)

// Checker is one kind of check. Check looks once: a nil error is a pass and
// detail says what was seen ("HTTP 200", "3 connections to :5672"); an error
// is a failure and its text is the reason shown to the operator. Check must
// return soon after ctx ends (its timeout).
type Checker interface {
	Check(ctx context.Context) (detail string, err error)
}

// Closer is implemented by checkers that hold something between checks (a
// broker connection, an API watch); the scheduler closes them once, after
// the last Check has returned.
type Closer interface {
	Close() error
}

// PIDSource gives the service's main process: the supervised child in run
// mode, the process found in the shared PID namespace in sidecar mode. 0
// means there is none right now.
type PIDSource interface {
	PID() int
}

// Spawner starts a helper process (an exec check) and reports its end. It
// exists because under a supervisor that owns every wait4(-1), nothing else
// may wait for a child: the supervisor's Spawner hands the status over.
// attr.Sys must set Setpgid so that the whole group can be killed.
type Spawner interface {
	Start(argv []string, attr *os.ProcAttr) (pid int, done <-chan syscall.WaitStatus, err error)
}
