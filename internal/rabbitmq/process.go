package rabbitmq

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
)

// startProcess runs argv with env and its output appended to logPath, leading
// its own process group with SIGKILL as its parent-death signal. stdin may be
// nil (/dev/null).
func startProcess(name string, argv, env []string, dir, logPath string, stdin *os.File) (*proc.Process, error) {
	return proc.Start(name, argv, logPath, proc.Attr{Dir: dir, Env: env, Stdin: stdin})
}

// stop stops p's process group (proc.Process.Stop). Descendants that left the
// group (Erlang's port helpers run in sessions of their own) are killed too
// once the child is gone.
func stop(p *proc.Process, grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	defer killAll(descendants(p.Pid))
	return p.Stop(grace)
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
		if p.pid <= 1 {
			continue // never kill(-1), our own group or init
		}
		if _, start, ok := procStat(p.pid); ok && start == p.start {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}
