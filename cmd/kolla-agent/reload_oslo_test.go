package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
	"github.com/kolla-agent/kolla-agent/internal/osloservice"
)

// An oslo.service-based service (python3-oslo.service's ServiceLauncher,
// restart_method "mutate"), supervised by `kolla-agent run`, its config
// rendered from a volume the kubelet's own AtomicWriter updates: a new
// value of the mutable [DEFAULT] greeting in the volume -> rendered,
// committed, SIGHUP to the service's process group -> the same process
// reports the new value; the immutable color keeps its old one.
//
// oslo.service reloads on SIGHUP only when it runs as a daemon (its process
// group is not the terminal's foreground group, or it has no terminal):
// the supervisor's own process group for the service is what makes this
// work, and the service's report says what oslo.service decided.
func TestOsloServiceReload(t *testing.T) {
	if err := osloservice.CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	kw := atomicwriter.Start(t)
	vol := filepath.Join(t.TempDir(), "config_files") // the ConfigMap volume
	confDir := t.TempDir()
	live := filepath.Join(confDir, "service.conf") // the service's --config-file
	status := filepath.Join(t.TempDir(), "status.json")
	script, err := osloservice.WriteScript(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(greeting, color string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"service.conf.tmpl": osloservice.Config(greeting, color)}); err != nil {
			t.Fatal(err)
		}
	}
	write("hello", "red")
	cfg := agentYAML(t, fmt.Sprintf(`
run:
  grace: 10s
render:
  - {src: %[1]s/service.conf.tmpl, dest: %[2]s}
reload:
  quiet: 200ms
  stateDir: %[3]s
`, vol, live, t.TempDir()))
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	began := time.Now()
	a := startAgent(t, env, append([]string{"--config", cfg, "run", "--"}, osloservice.Command(script, live, status)...)...)
	agentExited := func() bool {
		select {
		case <-a.done:
			return true
		default:
			return false
		}
	}
	report := func(what string, ok func(osloservice.Status) bool) osloservice.Status {
		t.Helper()
		st, err := osloservice.WaitStatus(status, 60*time.Second, agentExited, ok)
		if err != nil {
			t.Fatalf("%s: %v\nlast report: %+v\nagent output:\n%s", what, err, st, a.out.String())
		}
		return st
	}
	st0 := report("the service's first report", func(st osloservice.Status) bool { return st.Event == "start" })
	t.Cleanup(func() {
		// A SIGKILLed agent (a failed test's cleanup) leaves its service
		// running: end it, if that pid is still this test's service.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st0.Pid)); err == nil && strings.Contains(string(b), status) {
			syscall.Kill(-st0.Pid, syscall.SIGKILL)
		}
	})
	t.Logf("agent start -> service reports: %v", time.Since(began).Round(time.Millisecond))
	if child := childOf(t, a.cmd.Process.Pid); st0.Pid != child {
		t.Fatalf("the reporting service is pid %d, the agent's child %d", st0.Pid, child)
	}
	if st0.Pgrp != st0.Pid {
		t.Errorf("the service (pid %d) is in process group %d, not one of its own", st0.Pid, st0.Pgrp)
	}
	if st0.Daemon == nil || !*st0.Daemon {
		t.Fatalf("oslo.service does not consider the supervised service a daemon (SIGHUP would not reload it): %+v", st0)
	}
	if st0.Greeting != "hello" || st0.Color != "red" {
		t.Fatalf("first report: %+v", st0)
	}

	for i, g := range []string{"bonjour", "ciao"} {
		applied := strings.Count(a.out.String(), `msg="reload pass" outcome=applied`) // the pass line: see TestKeystoneReload
		signalled := strings.Count(a.out.String(), "signalling the service")
		changed := time.Now()
		write(g, "green")
		eventually(t, "reload pass "+g+" applied", func() bool {
			return strings.Count(a.out.String(), `msg="reload pass" outcome=applied`) > applied
		})
		st := report("the service's report of "+g, func(st osloservice.Status) bool { return st.Resets == i+1 })
		t.Logf("volume swap -> service reports %q: %v", g, time.Since(changed).Round(time.Millisecond))
		if got := strings.Count(a.out.String(), "signalling the service"); got != signalled+1 {
			t.Errorf("signalled %d times for one change, want once:\n%s", got-signalled, a.out.String())
		}
		if b, _ := os.ReadFile(live); string(b) != osloservice.Config(g, "green") {
			t.Errorf("live config after the reload:\n%s", b)
		}
		if st.Greeting != g {
			t.Errorf("greeting %q after the reload, want %q", st.Greeting, g)
		}
		if st.Color != "red" {
			t.Errorf("the immutable color is %q after a mutate reload, want the old red", st.Color)
		}
		if st.Pid != st0.Pid || st.Starts != 1 || st.Event != "reset" {
			t.Errorf("the service was not reloaded in place: %+v (first: %+v)", st, st0)
		}
		if !slices.Equal(st.Changed, []string{"DEFAULT.greeting"}) {
			t.Errorf("oslo.config's mutate hook saw %v, want [DEFAULT.greeting]", st.Changed)
		}
	}
	if want := fmt.Sprintf("pgid=%d", st0.Pid); !strings.Contains(a.out.String(), want) {
		t.Errorf("the signal did not go to the service's process group (%s):\n%s", want, a.out.String())
	}
	if child := childOf(t, a.cmd.Process.Pid); child != st0.Pid {
		t.Errorf("the agent's child is pid %d now, was %d: the service was restarted", child, st0.Pid)
	}
	if !strings.Contains(a.out.String(), "signal=hangup") {
		t.Errorf("the signal was not SIGHUP:\n%s", a.out.String())
	}
	// The service's stdout passes through the agent's.
	eventually(t, "the service's greeting=ciao line in the agent's output", func() bool {
		return strings.Contains(a.out.String(), "greeting=ciao")
	})
	a.running()

	// SIGTERM: the agent passes it to the group, oslo.service's graceful
	// shutdown ends the service (0), and the agent exits with its code.
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(0)
}
