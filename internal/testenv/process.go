package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// process is one started component. For a child of this process, a single
// goroutine owns cmd.Wait and closes done. Processes adopted from a pids file
// (Open) are not our children, so their exit is observed through /proc.
type process struct {
	name      string
	pid       int
	log       string
	logOffset int64  // where this run's output starts in log
	dir       string // the Env's directory; every component's command line names it

	done chan struct{} // closed when the child has been reaped; nil when adopted
	err  error         // the child's exit status, valid once done is closed
}

// startProcess runs bin with its output appended to logPath. Unless detach is
// set, the child gets SIGKILL when its parent dies, so a crashed test binary
// does not leave a control plane behind. (Linux sends it when the forking
// thread exits; the Go runtime ends a thread only when a goroutine exits
// while locked to it, which tests rarely do.) Detached children get their own
// session and outlive the command that started them.
func startProcess(name, bin string, args []string, dir, logPath string, detach bool) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==> %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	offset, err := logf.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout = logf // an *os.File is handed to the child as is: no copying goroutine
	cmd.Stderr = logf
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, pid: cmd.Process.Pid, log: logPath, logOffset: offset, dir: dir, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// childEnv is this process' environment without proxy settings: every
// component talks to its neighbours on loopback only.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "KUBECONFIG":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// adopt returns the process for a PID recorded in a pids file, or nil when
// that PID is gone or now belongs to something else (its command line no
// longer names dir): a recycled PID must never be signalled.
func adopt(name string, pid int, dir, logPath string) *process {
	p := &process{name: name, pid: pid, log: logPath, dir: dir}
	if !p.alive() {
		return nil
	}
	return p
}

// exited reports, without blocking, whether the process has ended.
func (p *process) exited() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	return !p.alive()
}

// alive reports whether pid is a live (non-zombie) process whose command line
// names the Env's directory.
func (p *process) alive() bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(p.dir+string(os.PathSeparator))) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		if s := stat[i+2]; s == 'Z' || s == 'X' {
			return false
		}
	}
	return true
}

// wait blocks until the process has exited or d has passed.
func (p *process) wait(d time.Duration) bool {
	if p.done != nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-p.done:
			return true
		case <-t.C:
			return false
		}
	}
	deadline := time.Now().Add(d)
	for {
		if !p.alive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // not our child: /proc is the only way to see it go
	}
}

func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s (pid %d): %w", p.name, p.pid, err)
	}
	return nil
}

// stop sends SIGTERM and, if the process is still there after grace, SIGKILL.
// A zero grace means SIGKILL straight away.
func (p *process) stop(grace time.Duration) error {
	if grace > 0 {
		if err := p.signal(syscall.SIGTERM); err != nil {
			return err
		}
		if p.wait(grace) {
			return nil
		}
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(stopGrace) {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid)
	}
	return nil
}

// exitError describes how a child that should still be running ended, with
// the end of its log, which is where the reason is.
func (p *process) exitError() error {
	status := "exited"
	if p.err != nil {
		status = p.err.Error()
	}
	out := p.output()
	err := fmt.Errorf("%s (pid %d) %s; last lines of %s:\n%s", p.name, p.pid, status, p.log, lastLines(out, 15))
	if strings.Contains(out, "address already in use") {
		err = fmt.Errorf("%w: %w", errPortClash, err)
	}
	return err
}

// errPortClash: another process took a port between our choosing it and the
// component binding it.
var errPortClash = errors.New("port already in use")

// output returns what this run of the process has written to its log.
func (p *process) output() string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Seek(p.logOffset, io.SeekStart); err != nil {
		return err.Error()
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// lastLines returns the last n lines of s, each cut to a readable length.
func lastLines(s string, n int) string {
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
