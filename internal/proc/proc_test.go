package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kolla-agent/kolla-agent/internal/poll"
)

// Nothing here may leave a goroutine behind: that is the point of reaping
// without one.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, script string, a Attr) *Process {
	t.Helper()
	p, err := Start("sh", []string{"sh", "-c", script}, filepath.Join(t.TempDir(), "sh.log"), a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(0); err != nil {
			t.Error(err)
		}
	})
	return p
}

// waitFor polls cond until it holds or 10s have passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

// stat returns the fields of /proc/PID/stat after the command name, from
// the state on, or nil when pid is gone.
func stat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
}

func gone(pid int) bool {
	f := stat(pid)
	return f == nil || f[0] == "Z" || f[0] == "X"
}

func TestExitError(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"status", "echo first; echo last >&2; exit 3", "exited with status 3"},
		{"signal", "echo last; kill -USR1 $$", "killed by user defined signal 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, tc.script, Attr{})
			if !p.Wait(10 * time.Second) {
				t.Fatal("still running")
			}
			err := p.ExitError().Error()
			if !strings.Contains(err, tc.want) || !strings.HasSuffix(err, "\nlast") || !strings.Contains(err, p.Log) {
				t.Errorf("ExitError() = %q, want %q and the end of %s", err, tc.want, p.Log)
			}
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Errorf("Signal after exit: %v", err)
			}
		})
	}
}

func TestStop(t *testing.T) {
	t.Run("SIGTERM", func(t *testing.T) {
		p := start(t, "exec sleep 30", Attr{})
		if err := p.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := p.ExitError().Error(); !strings.Contains(err, "killed by terminated") {
			t.Errorf("ExitError() = %q", err)
		}
	})
	t.Run("SIGKILL after grace", func(t *testing.T) {
		p := start(t, "trap '' TERM; echo ready; while :; do sleep 0.05; done", Attr{})
		waitFor(t, "the trap", func() bool { return strings.Contains(p.Output(), "ready") })
		began := time.Now()
		if err := p.Stop(300 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < 300*time.Millisecond {
			t.Errorf("stopped after %v, before the grace ran out", took)
		}
		if err := p.ExitError().Error(); !strings.Contains(err, "killed by killed") {
			t.Errorf("ExitError() = %q", err)
		}
		if err := p.Stop(time.Second); err != nil {
			t.Errorf("second Stop: %v", err)
		}
	})
	t.Run("group", func(t *testing.T) {
		// The grandchild ignores SIGTERM too; only the group's SIGKILL ends it.
		p := start(t, "trap '' TERM; sleep 30 & echo $!; wait", Attr{})
		var grandchild int
		waitFor(t, "the grandchild's pid", func() bool {
			grandchild, _ = strconv.Atoi(strings.TrimSpace(p.Output()))
			return grandchild > 0
		})
		if f := stat(grandchild); f == nil || f[2] != strconv.Itoa(p.Pid) {
			t.Fatalf("grandchild %d: stat %v, want process group %d", grandchild, f, p.Pid)
		}
		if err := p.Stop(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the grandchild to die", func() bool { return gone(grandchild) })
	})
}

func TestSignalGroup(t *testing.T) {
	p := start(t, "sleep 30 & echo $!; wait", Attr{})
	var grandchild int
	waitFor(t, "the grandchild's pid", func() bool {
		grandchild, _ = strconv.Atoi(strings.TrimSpace(p.Output()))
		return grandchild > 0
	})
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{p.Pid, grandchild} {
		waitFor(t, "pid "+strconv.Itoa(pid)+" stopped", func() bool { f := stat(pid); return f != nil && f[0] == "T" })
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the grandchild to resume", func() bool { f := stat(grandchild); return f != nil && f[0] == "S" })
}

func TestOutput(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	run := func(script string) *Process {
		p, err := Start("sh", []string{"sh", "-c", script}, log, Attr{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Wait(10 * time.Second) {
			t.Fatal("still running")
		}
		return p
	}
	first := run("echo one")
	second := run("echo two; echo three >&2")
	if got := first.Output(); !strings.HasPrefix(got, "one\n==> ") {
		t.Errorf("first Output() = %q: want its line, then the second run's", got)
	}
	if got := second.Output(); got != "two\nthree\n" {
		t.Errorf("second Output() = %q", got)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "==> "); n != 2 || !strings.Contains(string(b), " sh -c echo one\n") {
		t.Errorf("log has %d headers, want 2 naming the command:\n%s", n, b)
	}
}

func TestLastLines(t *testing.T) {
	long := strings.Repeat("x", 500)
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"fewer", "a\nb\n", 5, "a\nb"},
		{"more", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no newline", "a\nb", 1, "b"},
		{"long line", "a\n" + long + "\n", 5, "a\n" + long[:400] + "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LastLines(tc.in, tc.n); got != tc.want {
				t.Errorf("LastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}

func TestDetach(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detach bool
	}{{"group", false}, {"session", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, "exec sleep 30", Attr{Detach: tc.detach})
			f := stat(p.Pid) // state ppid pgrp session ...
			if f == nil || f[2] != strconv.Itoa(p.Pid) {
				t.Fatalf("stat %v: want process group %d", f, p.Pid)
			}
			if leads := f[3] == strconv.Itoa(p.Pid); leads != tc.detach {
				t.Errorf("session %s, pid %d, detached %v", f[3], p.Pid, tc.detach)
			}
		})
	}
}

func TestAdopt(t *testing.T) {
	child := start(t, "exec sleep 30", Attr{})
	running := true
	alive := func() bool { return running }
	if p := Adopt("sleep", 1, "", alive); p != nil {
		t.Error("adopted pid 1")
	}
	if p := Adopt("sleep", child.Pid, child.Log, func() bool { return false }); p != nil {
		t.Error("adopted a process reported gone")
	}
	p := Adopt("sleep", child.Pid, child.Log, alive)
	if p == nil || p.Exited() {
		t.Fatal("not adopted, or exited")
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !child.Wait(10 * time.Second) {
		t.Fatal("adopted process not signalled")
	}
	running = false
	if !p.Wait(time.Second) {
		t.Error("adopted process still running once alive says not")
	}
}

func TestRefusesLowPids(t *testing.T) {
	for _, pid := range []int{-1, 0, 1} {
		p := &Process{Name: "bogus", Pid: pid}
		if err := p.Signal(syscall.SIGKILL); err == nil {
			t.Errorf("Signal to pid %d: no error", pid)
		}
	}
}
