// Package proc runs test-owned child processes: each leads a process group
// of its own (or a session, when detached), appends its stdout and stderr to
// a log file, and is stopped by signalling its whole group, SIGTERM then
// SIGKILL.
//
// No goroutine waits for a child: Exited reaps it with a non-blocking wait4,
// so a process kept across a package's tests holds no goroutine between them
// (goleak). A Process from Adopt is not our child; the caller says whether it
// still runs, and it alone, not a group, is signalled.
//
// It does not follow a child's descendants out of its group, nor kill a group
// whose leader has already been reaped: a recycled PID must never be
// signalled, and nothing guards the group ID once its leader is gone.
package proc
