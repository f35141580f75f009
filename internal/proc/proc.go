package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// killWait is how long Stop waits for a process to go after SIGKILL.
	killWait = 10 * time.Second
	// exitErrorLines is how much of the log ExitError quotes: the reason a
	// child died is usually at the end.
	exitErrorLines = 20
)

// Attr says how Start runs a child.
type Attr struct {
	Dir   string
	Env   []string // nil: this process' environment
	Stdin *os.File // nil: /dev/null
	// Detach gives the child a session of its own and no parent-death
	// signal, so it outlives the process that started it. Otherwise it
	// leads a new process group and gets SIGKILL when its parent dies, so a
	// crashed test binary leaves nothing behind. (Linux sends it when the
	// forking thread exits; the Go runtime ends a thread only when a
	// goroutine exits while locked to it, which tests rarely do.)
	Detach bool
}

// Process is a child started by Start, or a process adopted by Adopt. Name,
// Pid and Log are set once and only read.
type Process struct {
	Name string
	Pid  int
	Log  string // the file its stdout and stderr are appended to

	offset int64       // where this run's output starts in Log
	alive  func() bool // set when adopted: not our child, so wait4 cannot see it

	mu     sync.Mutex
	reaped bool
	waited bool // status is from wait4 (not ECHILD: reaped by someone else)
	status syscall.WaitStatus
}

// Start runs argv (argv[0] looked up in PATH) with its output appended to
// logPath, after a header line that names the command and the time.
func Start(name string, argv []string, logPath string, a Attr) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==> %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	offset, err := logf.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	stdin := a.Stdin
	if stdin == nil {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		defer devnull.Close()
		stdin = devnull
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if a.Detach {
		sys = &syscall.SysProcAttr{Setsid: true}
	}
	op, err := os.StartProcess(bin, argv, &os.ProcAttr{
		Dir:   a.Dir,
		Env:   a.Env,
		Files: []*os.File{stdin, logf, logf}, // the log file itself: no copying goroutine
		Sys:   sys,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pid := op.Pid
	_ = op.Release() // Exited reaps it by PID
	return &Process{Name: name, Pid: pid, Log: logPath, offset: offset}, nil
}

// Adopt returns a Process for pid, which we did not start, or nil when pid
// cannot be one (<= 1) or alive reports it gone. alive must tell a recycled
// PID from the process meant (by its command line, say): afterwards it alone
// decides whether the process still runs, and so whether it is signalled.
func Adopt(name string, pid int, logPath string, alive func() bool) *Process {
	if pid <= 1 || !alive() {
		return nil
	}
	return &Process{Name: name, Pid: pid, Log: logPath, alive: alive}
}

// Exited reports, without blocking, whether the process has ended; for a
// child, the first call that sees it reaps it.
func (p *Process) Exited() bool {
	if p.alive != nil {
		return !p.alive()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedLocked()
}

func (p *Process) exitedLocked() bool {
	for !p.reaped {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(p.Pid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: not ours any more, nothing to wait for
			p.reaped = true
		case pid == p.Pid:
			p.reaped, p.waited, p.status = true, true, ws
		default:
			return false
		}
	}
	return true
}

// Wait polls until the process has exited or d has passed.
func (p *Process) Wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.Exited() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Signal sends sig to the child's process group, or to an adopted process
// alone (one we did not start need not lead a group). Once the process has
// exited nothing is sent.
func (p *Process) Signal(sig syscall.Signal) error {
	// kill(0) would signal our own group, kill(-1) everything we may signal.
	if p.Pid <= 1 {
		return fmt.Errorf("%s: refusing to signal pid %d", p.Name, p.Pid)
	}
	target := -p.Pid
	if p.alive != nil {
		if !p.alive() {
			return nil
		}
		target = p.Pid
	} else {
		// Held across the kill: nobody reaps the leader, freeing its PID
		// and group ID for reuse, between the check and the signal.
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.exitedLocked() {
			return nil
		}
	}
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s (pid %d): %w", p.Name, p.Pid, err)
	}
	return nil
}

// Stop sends SIGTERM and, if the process is still there after grace,
// SIGKILL. A zero grace means SIGKILL straight away.
func (p *Process) Stop(grace time.Duration) error {
	if grace > 0 {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		if p.Wait(grace) {
			return nil
		}
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.Wait(killWait) {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.Pid)
	}
	return nil
}

// ExitError describes how a process that should still run ended, with the
// end of its log, which is where the reason is.
func (p *Process) ExitError() error {
	p.mu.Lock()
	waited, ws := p.waited, p.status
	p.mu.Unlock()
	status := "exited"
	switch {
	case waited && ws.Signaled():
		status = "killed by " + ws.Signal().String()
	case waited:
		status = "exited with status " + strconv.Itoa(ws.ExitStatus())
	}
	return fmt.Errorf("%s (pid %d) %s; last lines of %s:\n%s", p.Name, p.Pid, status, p.Log, LastLines(p.Output(), exitErrorLines))
}

// Output returns what this run of the process has written to its log (all
// of the log for an adopted process), or the error reading it.
func (p *Process) Output() string {
	f, err := os.Open(p.Log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Seek(p.offset, io.SeekStart); err != nil {
		return err.Error()
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// LastLines returns the last n lines of s, each cut to a readable length.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = l[:400] + "..."
		}
	}
	return strings.Join(lines, "\n")
}
