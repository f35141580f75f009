package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
)

// stopGrace is how long a component gets to exit after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// startProcess runs bin with its output appended to logPath. Unless detach is
// set, the child gets SIGKILL when its parent dies, so a crashed test binary
// does not leave a control plane behind; detached children get their own
// session and outlive the command that started them.
func startProcess(name, bin string, args []string, dir, logPath string, detach bool) (*proc.Process, error) {
	return proc.Start(name, append([]string{bin}, args...), logPath, proc.Attr{Dir: dir, Env: childEnv(), Detach: detach})
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

// startedAt is when process pid started: its starttime in /proc/PID/stat
// (clock ticks after boot; USER_HZ is 100 on every Linux ABI) after the
// boot time in /proc/stat (whole seconds). False when either is unreadable.
func startedAt(pid int) (time.Time, bool) {
	_, ticks, ok := strings.Cut(processID(pid), " ")
	n, err := strconv.ParseInt(ticks, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for line := range strings.Lines(string(b)) {
		if v, found := strings.CutPrefix(line, "btime "); found {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(boot, 0).Add(time.Duration(n) * (time.Second / 100)), err == nil
		}
	}
	return time.Time{}, false
}

// adopt returns the process for a PID recorded in a pids file, or nil when
// that PID is gone or now belongs to something else (its command line no
// longer names dir): a recycled PID must never be signalled.
func adopt(name string, pid int, dir, logPath string) *proc.Process {
	return proc.Adopt(name, pid, logPath, func() bool { return alive(pid, dir) })
}

// Running lists the live processes naming dir on their command line: an
// Env's components, its containerd shims, and their children.
func Running(dir string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, ent := range entries {
		if pid, err := strconv.Atoi(ent.Name()); err == nil && pid != os.Getpid() && alive(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// alive reports whether pid is a live (non-zombie) process whose command line
// names the Env's directory.
func alive(pid int, dir string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(dir+string(os.PathSeparator))) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
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

// exitError is p.ExitError, marked errPortClash when the component could not
// bind a port.
func exitError(p *proc.Process) error {
	err := p.ExitError()
	if strings.Contains(p.Output(), "address already in use") {
		err = fmt.Errorf("%w: %w", errPortClash, err)
	}
	return err
}

// errPortClash: another process took a port between our choosing it and the
// component binding it.
var errPortClash = errors.New("port already in use")
