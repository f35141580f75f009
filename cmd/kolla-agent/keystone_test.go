package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/keystone"
	"github.com/kolla-agent/kolla-agent/internal/proc"
)

// keystoneInstance is a keystone config and database, made once for the
// package (db_sync takes seconds) under the suite's directory.
var keystoneOnce = sync.OnceValues(func() (*keystone.Instance, error) {
	return keystone.Prepare(filepath.Join(s.dir, "keystone"))
})

// childOf is the pid of a child process of pid (the supervised service).
func childOf(t testing.TB, pid int) int {
	t.Helper()
	var found int
	eventually(t, "the agent's child", func() bool {
		if cs := proc.Children(pid); len(cs) > 0 {
			found = cs[0]
			return true
		}
		return false
	})
	return found
}

var workerReady = regexp.MustCompile(`WSGI app \d+ \(mountpoint='[^']*'\) ready`)

// The real Keystone under uWSGI, supervised by `kolla-agent run` as its
// entrypoint: startup and readiness fail until keystone answers /v3, then
// pass; keystone stopped with SIGSTOP fails readiness within timeout +
// period while liveness stays 200; SIGCONT makes it ready again; SIGTERM
// stops it within its grace period with its own exit code.
func TestKeystoneProbes(t *testing.T) {
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	ksPort := freePort(t)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const period, timeout = 500 * time.Millisecond, 400 * time.Millisecond
	cfg := agentYAML(t, fmt.Sprintf(`
run:
  grace: 30s
probes:
  address: 127.0.0.1:%d
  socket: off
  checks:
    - name: api
      http: {url: "http://127.0.0.1:%d/v3", expectStatus: [200], bodyRegex: '"id": *"v3'}
      probes: [startup, readiness]
      period: %v
      timeout: %v
      failureThreshold: 1
    - name: uwsgi
      process: {}
      probes: [liveness]
      period: 1s
`, port, ksPort, period, timeout))
	a := startAgent(t, inst.Env(), append([]string{"--config", cfg, "run", "--"}, inst.Command(ksPort)...)...)

	// Until keystone answers, startup and readiness fail ("starting").
	body := waitStatus(t, base+"/readyz?verbose", 503, 10*time.Second)
	if !strings.Contains(body, "starting") {
		t.Errorf("readiness before startup does not say starting:\n%s", body)
	}
	sawDown := false
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, _ := get(base + "/startupz")
		if code == 200 {
			break
		}
		if code == 503 {
			sawDown = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("/startupz never passed:\n%s", a.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !sawDown {
		t.Error("/startupz passed before keystone could have answered")
	}
	if code, b := get(fmt.Sprintf("http://127.0.0.1:%d/v3", ksPort)); code != 200 {
		t.Fatalf("startup passed but keystone's /v3 answers %d %q", code, b)
	}
	waitStatus(t, base+"/readyz", 200, 5*time.Second)
	// Every worker loaded (a worker still loading ignores uWSGI's graceful
	// stop, see internal/keystone), so the SIGTERM below is a fair test.
	eventually(t, "both uWSGI workers loaded", func() bool { return len(workerReady.FindAllString(a.out.String(), -1)) >= 2 })

	// Hang the whole of keystone (the master, its HTTP router, its workers).
	master := childOf(t, a.cmd.Process.Pid)
	stopped := time.Now()
	if err := syscall.Kill(-master, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	body = waitStatus(t, base+"/readyz?verbose", 503, 10*time.Second)
	took := time.Since(stopped)
	t.Logf("readiness failed %v after SIGSTOP (timeout %v + period %v)", took.Round(time.Millisecond), timeout, period)
	// Failed by the look's own timeout (the figure is logged above, not
	// judged: a loaded machine's scheduling is not the agent's).
	if !strings.Contains(body, "[-]api") || !strings.Contains(body, "timed out after "+timeout.String()) {
		t.Errorf("readiness reason, want the api look timed out after %v:\n%s", timeout, body)
	}
	for range 5 {
		if code, b := get(base + "/livez"); code != 200 {
			t.Fatalf("/livez while keystone hangs: %d %q", code, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := syscall.Kill(-master, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, base+"/readyz", 200, 10*time.Second)

	a.cmd.Process.Signal(syscall.SIGTERM)
	waitStatus(t, base+"/readyz", 503, 2*time.Second)
	a.wantExit(0) // uWSGI with --die-on-term exits 0
}
