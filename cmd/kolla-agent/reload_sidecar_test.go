package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// Reload in sidecar mode: the service is another process of the pod's
// PID namespace (started here by the test), found by its pid file and
// signalled with SIGHUP. The agent is SIGKILLed between the commit of a
// two-file config and its verdict, and started again: it writes the last
// good set back whole, then takes the new one again, so the service ends
// on the new set and the files never stay a mix.
func TestReloadSidecarSurvivesAgentKill(t *testing.T) {
	kw := atomicwriter.Start(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "config_files")
	write := func(v string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"a.conf": "[a]\nv = " + v + "\n", "b.conf": "[b]\nv = " + v + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	etc := filepath.Join(dir, "etc") // the volume the two containers share
	os.Mkdir(etc, 0o755)
	okFile := filepath.Join(dir, "ok")
	port := freePort(t)
	cfg := agentYAML(t, fmt.Sprintf(`
render:
  - {src: %[1]s/a.conf, dest: %[2]s/a.conf}
  - {src: %[1]s/b.conf, dest: %[2]s/b.conf}
reload:
  quiet: 100ms
  verifyTimeout: 60s
  stateDir: %[3]s/state
sidecar:
  process: {pidFile: %[3]s/service.pid}
probes:
  address: 127.0.0.1:%[4]d
  socket: off
  checks:
    - name: loaded
      exec: {command: ["/bin/sh", "-c", "test -e %[5]s && cat %[2]s/a.conf %[2]s/b.conf | cmp -s - %[3]s/loaded"]}
      probes: [readiness]
      period: 200ms
      timeout: 150ms
      failureThreshold: 1
`, vol, etc, dir, port, okFile))
	// The init container renders; then the service starts.
	startAgent(t, nil, "--config", cfg, "render").wantExit(0)
	load := fmt.Sprintf("cat %[1]s/a.conf %[1]s/b.conf > %[2]s/loaded.tmp; mv %[2]s/loaded.tmp %[2]s/loaded", etc, dir)
	svc := exec.Command("/bin/sh", "-c", fmt.Sprintf(`echo $$ > %s/service.pid; trap '%s' HUP; %s; while :; do sleep 0.1; done`, dir, load, load))
	svc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-svc.Process.Pid, syscall.SIGKILL); svc.Wait() })
	loaded := func() string { b, _ := os.ReadFile(filepath.Join(dir, "loaded")); return string(b) }
	eventually(t, "the service loaded v1", func() bool { return strings.Contains(loaded(), "v = 1") })

	first := startAgent(t, nil, "--config", cfg, "sidecar")
	first.waitLog("reload: watching")
	write("2")
	first.waitLog("reload: new config committed") // and verification waits for ok
	eventually(t, "the service signalled", func() bool { return strings.Count(loaded(), "v = 2") == 2 })
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.exit(10 * time.Second)

	second := startAgent(t, nil, "--config", cfg, "sidecar")
	second.waitLog("restoring the last good config")
	os.WriteFile(okFile, nil, 0o644)
	second.waitLog("outcome=applied")
	for _, f := range []string{"a.conf", "b.conf"} {
		if b, _ := os.ReadFile(filepath.Join(etc, f)); !strings.Contains(string(b), "v = 2") {
			t.Errorf("%s after the recovery and the reload: %q", f, b)
		}
	}
	if got := loaded(); strings.Count(got, "v = 2") != 2 {
		t.Errorf("the service loaded %q", got)
	}
	if strings.Contains(second.out.String(), "outcome=rolled-back") {
		t.Errorf("rolled back:\n%s", second.out.String())
	}
}
