package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/poll"
)

// TestAbandoned: a node is brought down by the next Env only when nobody is
// left: the lock's owner is gone (or its PID now names another process) and
// no process but a shim names its directory.
func TestAbandoned(t *testing.T) {
	dir := t.TempDir()
	self := processID(os.Getpid())
	if self == "" {
		t.Fatal("processID of the test itself is empty")
	}
	pid, start, _ := strings.Cut(self, " ")
	recycled := pid + " " + start + "0" // the same PID, another start time

	for _, tc := range []struct {
		name, owner string
		want        bool
	}{
		{"an old lock without owner", "", true},
		{"the owner runs", self, false},
		{"the owner's PID was recycled", recycled, true},
		{"a garbled owner", "x", true},
	} {
		if got := abandoned(dir, tc.owner); got != tc.want {
			t.Errorf("%s: abandoned = %v, want %v", tc.name, got, tc.want)
		}
	}

	// A component (any process naming dir/) keeps it, whoever the owner was.
	comp := exec.Command("sh", "-c", "sleep 60; exit 0", filepath.Join(dir, "etcd-data"))
	if err := comp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { comp.Process.Kill(); comp.Wait() })
	waitFor(t, "a component to keep the node", func() bool { return !abandoned(dir, "") })
	// A shim alone does not.
	shim := exec.Command("sh", "-c", "sleep 60; exit 0", "containerd-shim-runc-v2", "-address", filepath.Join(dir, "node", "containerd.sock"))
	if err := shim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shim.Process.Kill(); shim.Wait() })
	comp.Process.Kill()
	comp.Wait()
	// Eventually: a child the shell forked just before it was killed shows
	// the shell's command line until it execs. The shim stays throughout.
	waitFor(t, "a node with only a shim left to be abandoned", func() bool { return abandoned(dir, "") })
	// Another directory's process is not this one's component.
	if !abandoned(dir+"x", "") {
		t.Error("a process naming a longer directory kept this one")
	}
}

// startedAt reads a process's start to within the boot time's second: what
// runGuard counts the go command's kill from.
func TestStartedAt(t *testing.T) {
	before := time.Now()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	after := time.Now()
	at, ok := startedAt(cmd.Process.Pid)
	if !ok {
		t.Fatal("startedAt: no start read")
	}
	// btime is whole seconds: the boot may have been up to a second later.
	if at.Before(before.Add(-1500*time.Millisecond)) || at.After(after.Add(500*time.Millisecond)) {
		t.Errorf("started at %s, want between %s and %s", at.Format(time.StampMilli), before.Format(time.StampMilli), after.Format(time.StampMilli))
	}
	if _, ok := startedAt(1 << 30); ok {
		t.Error("startedAt of no process read a start")
	}
}

// fireAt: a margin before go test's kill (the timeout and its wait delay
// after the binary's start) or its -timeout panic (the timeout after the
// tests start), whichever is earlier.
func TestFireAt(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		tests   time.Duration // after t0; <0: not started
		timeout time.Duration
		at      time.Duration // after t0
		what    string
	}{
		{"tests start soon: the panic", 10 * time.Second, 40 * time.Second, 40 * time.Second, "the -timeout panic ends this binary in 10s"},
		{"a long setup: the kill", 5 * time.Minute, 40 * time.Second, 90 * time.Second, "the go command kills this binary in 10s"},
		{"not started: the kill", -1, 30 * time.Minute, 32 * time.Minute, "the go command kills this binary in 1m0s"},
		{"a long timeout's wait delay is a tenth", 2 * time.Minute, 30 * time.Minute, 31 * time.Minute, "the -timeout panic ends"},
		{"a long timeout, a long setup", 4 * time.Minute, 30 * time.Minute, 32 * time.Minute, "the go command kills"},
	} {
		var tests time.Time
		if tc.tests >= 0 {
			tests = t0.Add(tc.tests)
		}
		at, why := fireAt(t0, tests, tc.timeout)
		if !at.Equal(t0.Add(tc.at)) || !strings.Contains(why, tc.what) {
			t.Errorf("%s: fires at t0+%s (%q), want t0+%s (%q)", tc.name, at.Sub(t0), why, tc.at, tc.what)
		}
	}
}

func TestParseNodeLock(t *testing.T) {
	for in, want := range map[string][2]string{
		"/tmp/a\n":             {"/tmp/a", ""}, // the format before owners
		"/tmp/a\n42 12345\n":   {"/tmp/a", "42 12345"},
		" /tmp/a \n 42 12345 ": {"/tmp/a", "42 12345"},
		"":                     {"", ""},
	} {
		dir, owner := parseNodeLock([]byte(in))
		if dir != want[0] || owner != want[1] {
			t.Errorf("parseNodeLock(%q) = %q, %q; want %q, %q", in, dir, owner, want[0], want[1])
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 5*time.Second, what, cond)
}
