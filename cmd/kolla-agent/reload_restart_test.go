package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// action restart: the service is stopped (SIGTERM, its grace period) and
// started again inside the container, by the same agent, which stays; the
// new process runs the new config, verified by a readiness check that
// compares what the service loaded with the committed file. A change that
// arrives while a restart is in progress (the service takes a second to
// stop) is not lost: the service ends up on the last config.
func TestReloadRestart(t *testing.T) {
	kw := atomicwriter.Start(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "config_files")
	dest := filepath.Join(dir, "service.conf")
	loaded := filepath.Join(dir, "loaded")
	write := func(v string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"service.conf": "[DEFAULT]\nversion = " + v + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	port := freePort(t)
	cfg := agentYAML(t, fmt.Sprintf(`
run:
  grace: 10s
render:
  - {src: %[1]s/service.conf, dest: %[2]s}
reload:
  quiet: 100ms
  action: restart
  verifyTimeout: 20s
  stateDir: %[3]s
probes:
  address: 127.0.0.1:%[4]d
  socket: off
  checks:
    - name: loaded
      exec: {command: ["cmp", "-s", "%[2]s", "%[5]s"]}
      probes: [readiness]
      period: 200ms
      timeout: 150ms
      failureThreshold: 1
`, vol, dest, filepath.Join(dir, "state"), port, loaded))
	// The service loads its config at start, and takes a second to stop.
	script := fmt.Sprintf(`cp %s %s.tmp && mv %s.tmp %s; echo "service $$ started"; trap 'sleep 1; exit 0' TERM; while :; do sleep 0.1; done`, dest, loaded, loaded, loaded)
	a := startAgent(t, nil, "--config", cfg, "run", "--", "/bin/sh", "-c", script)
	waitStatus(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 200, 30*time.Second)
	first := childOf(t, a.cmd.Process.Pid)

	write("2")
	a.waitLog("outcome=applied")
	if got, _ := os.ReadFile(loaded); !strings.Contains(string(got), "version = 2") {
		t.Fatalf("the service loaded %q after the restart", got)
	}
	second := childOf(t, a.cmd.Process.Pid)
	if second == first {
		t.Errorf("the service was not restarted (pid %d)", first)
	}
	if !strings.Contains(a.out.String(), "restarting the service inside the container") {
		t.Errorf("no restart logged:\n%s", a.out.String())
	}

	// A change while the restart is in progress.
	n := strings.Count(a.out.String(), `msg="reload pass" outcome=applied`)
	write("3")
	eventually(t, "the restart to start", func() bool {
		return strings.Count(a.out.String(), "restarting the service inside the container") >= 2
	})
	write("4")
	eventually(t, "the service on the last config", func() bool {
		got, _ := os.ReadFile(loaded)
		return strings.Contains(string(got), "version = 4") && strings.Count(a.out.String(), `msg="reload pass" outcome=applied`) >= n+2
	})
	a.running()
	if strings.Contains(a.out.String(), "outcome=rolled-back") {
		t.Errorf("a rollback:\n%s", a.out.String())
	}
}
