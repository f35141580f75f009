package rabbitmq

import (
	"bytes"
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

// process is one started child, leading its own process group, with
// SIGKILL as its parent-death signal (a crashed test binary leaves nothing
// behind). No goroutine waits for it: exited reaps it with a non-blocking
// wait4, so that a broker shared by a package's tests holds no goroutine
// between them (goleak in TestMain).
type process struct {
	name   string
	pid    int
	log    string
	offset int64 // where this run's output starts in log

	mu     sync.Mutex
	reaped bool
	status syscall.WaitStatus
}

// startProcess runs argv with env and its output appended to logPath. stdin
// may be nil (/dev/null).
func startProcess(name string, argv, env []string, dir, logPath string, stdin *os.File) (*process, error) {
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
	p, err := os.StartProcess(bin, argv, &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []*os.File{stdin, logf, logf},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pid := p.Pid
	_ = p.Release() // reaped by pid below
	return &process{name: name, pid: pid, log: logPath, offset: offset}, nil
}

// exited reports, without blocking, whether the process has ended; the
// first call that sees it reaps it.
func (p *process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return true
	}
	var ws syscall.WaitStatus
	for {
		pid, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: not ours any more, nothing to wait for
			p.reaped = true
			return true
		}
		if pid == p.pid {
			p.reaped, p.status = true, ws
			return true
		}
		return false
	}
}

// signalGroup signals the child's whole process group.
func (p *process) signalGroup(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s (pid %d): %w", p.name, p.pid, err)
	}
	return nil
}

// wait polls until the process has exited or d has passed.
func (p *process) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.exited() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// stop sends SIGTERM to the group and, after grace, SIGKILL. Descendants
// that left the group (Erlang's port helpers run in sessions of their own)
// are killed too once the child is gone.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	desc := descendants(p.pid)
	defer killAll(desc)
	if grace > 0 {
		if err := p.signalGroup(syscall.SIGTERM); err != nil {
			return err
		}
		if p.wait(grace) {
			return nil
		}
	}
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid)
	}
	return nil
}

// exitError describes how a child that should still run ended, with the end
// of its log.
func (p *process) exitError() error {
	p.mu.Lock()
	ws := p.status
	p.mu.Unlock()
	status := "exited with status " + strconv.Itoa(ws.ExitStatus())
	if ws.Signaled() {
		status = "killed by " + ws.Signal().String()
	}
	return fmt.Errorf("%s (pid %d) %s; last lines of %s:\n%s", p.name, p.pid, status, p.log, lastLines(p.output(), 20))
}

// output is what this run of the process wrote to its log.
func (p *process) output() string {
	f, err := os.Open(p.log)
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

// procID is a PID with its start time, so that a recycled PID is never
// signalled.
type procID struct {
	pid   int
	start string
}

// descendants lists the live descendants of pid, from /proc.
func descendants(pid int) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procID{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, start, ok := procStat(n)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], procID{pid: n, start: start})
	}
	var out []procID
	queue := []int{pid}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range children[cur] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// procStat reads a process' parent and start time from /proc/PID/stat.
func procStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	// "pid (comm) state ppid ... starttime(22nd field) ..."
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, "", false
	}
	return ppid, f[19], true
}

// killAll SIGKILLs the processes that are still the ones listed.
func killAll(ps []procID) {
	for _, p := range ps {
		if _, start, ok := procStat(p.pid); ok && start == p.start {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}
