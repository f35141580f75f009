package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePort is a loopback port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// get GETs a probe path of the agent: status code and body ("" and 0 when
// nothing answers).
func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers code.
func waitStatus(t testing.TB, url string, code int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, body := get(url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q, want %d within %v", url, got, body, code, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SIGTERM to `kolla-agent run` with probes: /readyz answers 503 at once
// while /livez stays 200 through the service's grace period, and the exit
// code is the service's.
func TestRunProbesOrderedShutdown(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
run:
  grace: 20s
probes:
  address: 127.0.0.1:%d
  socket: %s/agent.sock
  checks:
    - name: ready-file
      exec: {command: "test -f %s/ready"}
      probes: [startup, readiness]
      period: 200ms
      timeout: 200ms
      failureThreshold: 1
`, port, dir, dir))
	// The service takes 1.5 s to stop after SIGTERM, and exits 7.
	script := "trap 'echo term > " + dir + "/term; sleep 1.5; exit 7' TERM; touch " + dir + "/ready; while :; do sleep 0.05; done"
	a := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sh", "-c", script)
	waitStatus(t, base+"/startupz", 200, 20*time.Second)
	waitStatus(t, base+"/readyz", 200, 5*time.Second)
	if code, body := get(base + "/livez"); code != 200 {
		t.Fatalf("/livez %d %q", code, body)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	body := waitStatus(t, base+"/readyz?verbose", 503, 2*time.Second)
	if !strings.Contains(body, "stopping") {
		t.Errorf("/readyz during stop does not say stopping:\n%s", body)
	}
	// The service has its grace period; the agent still answers liveness.
	eventually(t, "service got SIGTERM", func() bool { _, err := os.Stat(filepath.Join(dir, "term")); return err == nil })
	if code, body := get(base + "/livez"); code != 200 {
		t.Errorf("/livez during the grace period: %d %q, want 200", code, body)
	}
	a.wantExit(7)
}

// A failing readiness check, thresholds, ?exclude, /readyz/NAME, JSON, the
// drain file and the exec-probe client against the running agent.
func TestRunProbesChecksAndClient(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	sock := filepath.Join(dir, "agent.sock")
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: 127.0.0.1:%d
  socket: %s
  drainFile: %s/drain
  checks:
    - name: port
      tcp: {address: "%s"}
      period: 200ms
      timeout: 200ms
    - name: flag
      file: {path: %s/flag, maxAge: 1h}
      period: 200ms
      timeout: 100ms
      failureThreshold: 2
    - name: alive
      process: {}
      probes: [liveness]
      period: 200ms
      timeout: 100ms
`, port, sock, dir, l.Addr(), dir))
	a := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sleep", "300")

	body := waitStatus(t, base+"/readyz?verbose", 503, 10*time.Second)
	waitStatus(t, base+"/readyz/port", 200, 10*time.Second)
	body = waitStatus(t, base+"/readyz?verbose", 503, 5*time.Second)
	if !strings.Contains(body, "[-]flag") || !strings.Contains(body, "[+]port") {
		t.Errorf("verbose output lacks the checks' lines:\n%s", body)
	}
	waitStatus(t, base+"/readyz?exclude=flag", 200, 5*time.Second)
	if code, _ := get(base + "/readyz/nosuch"); code != 404 {
		t.Errorf("/readyz/nosuch: %d, want 404", code)
	}
	if code, body := get(base + "/livez/alive"); code != 200 {
		t.Errorf("/livez/alive: %d %q", code, body)
	}
	if code, body := get(base + "/readyz?format=json"); code != 503 || !strings.Contains(body, `"probe":"readiness"`) {
		t.Errorf("JSON: %d %q", code, body)
	}

	// The exec-probe client: 1 while not ready, with the reason.
	out, code := probeCmd(t, "readiness", "--socket", sock)
	if code != 1 || !strings.Contains(out, "flag") {
		t.Errorf("probe readiness while not ready: exit %d, %q", code, out)
	}
	os.WriteFile(filepath.Join(dir, "flag"), nil, 0o644)
	waitStatus(t, base+"/readyz", 200, 5*time.Second)
	out, code = probeCmd(t, "readiness", "--socket", sock, "--verbose")
	if code != 0 || !strings.Contains(out, "[+]flag") {
		t.Errorf("probe readiness when ready: exit %d, %q", code, out)
	}
	if out, code := probeCmd(t, "liveness", "--socket", sock); code != 0 {
		t.Errorf("probe liveness: exit %d, %q", code, out)
	}

	// Drain: readiness fails while the file exists, liveness does not.
	os.WriteFile(filepath.Join(dir, "drain"), nil, 0o644)
	body = waitStatus(t, base+"/readyz", 503, 5*time.Second)
	if !strings.Contains(body, "draining") {
		t.Errorf("drain reason: %q", body)
	}
	if code, _ := get(base + "/livez"); code != 200 {
		t.Errorf("/livez while draining: %d", code)
	}
	os.Remove(filepath.Join(dir, "drain"))
	waitStatus(t, base+"/readyz", 200, 5*time.Second)

	// Metrics on the same listener.
	_, metrics := get(base + "/metrics")
	for _, m := range []string{`kolla_agent_check_passing{check="port"} 1`, `kolla_agent_probe_passing{probe="readiness"} 1`, "kolla_agent_build_info{", `kolla_agent_check_failures_total{check="flag"}`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(143) // sleep dies of the SIGTERM

	// No agent listening any more: exit 1 and say so.
	out, code = probeCmd(t, "readiness", "--socket", sock)
	if code != 1 || !strings.Contains(out, "no agent answering on "+sock) {
		t.Errorf("probe with no agent: exit %d, %q", code, out)
	}
	if _, code := probeCmd(t, "nonsense", "--socket", sock); code != 1 {
		t.Errorf("probe nonsense: exit %d, want 1", code)
	}
}

// probeCmd runs `kolla-agent probe ARGS` and `kolla-agent-probe ARGS`,
// which must agree on the exit code and (but for the program's name and the
// checks' ages) the output, and returns the first's. The agent's state can
// change between the two runs: a disagreement is asked again a few times
// before it counts.
func probeCmd(t testing.TB, args ...string) (string, int) {
	t.Helper()
	run := func(argv ...string) (string, int) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = plainEnv()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	ages := regexp.MustCompile(`\([^()]* ago, took [^()]*\)`)
	same := func(a, b string) bool {
		return ages.ReplaceAllString(a, "") == ages.ReplaceAllString(strings.ReplaceAll(b, "kolla-agent-probe", "kolla-agent probe"), "")
	}
	var out, small string
	var code, smallCode int
	for range 5 {
		out, code = run(append([]string{s.bin, "probe"}, args...)...)
		small, smallCode = run(append([]string{s.probeBin}, args...)...)
		if smallCode == code && same(out, small) {
			return out, code
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("kolla-agent-probe %q: exit %d %q; kolla-agent probe: exit %d %q", args, smallCode, small, code, out)
	return out, code
}

// A side duty that fails (the probe address is taken) is logged and
// retried; the service runs on, and the probes come up once the address is
// free.
func TestRunSideDutyFailureSparesService(t *testing.T) {
	dir := t.TempDir()
	blocker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := blocker.Addr().String()
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: %s
  socket: off
  checks:
    - name: up
      process: {}
      period: 200ms
      timeout: 100ms
`, addr))
	a := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sh", "-c", "touch "+dir+"/started; exec sleep 300")
	a.waitLog("agent duty failed")
	eventually(t, "service started", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	a.running()
	blocker.Close()
	waitStatus(t, "http://"+addr+"/readyz", 200, 40*time.Second)
	_, metrics := get("http://" + addr + "/metrics")
	if !strings.Contains(metrics, `kolla_agent_duty_failures_total{duty="probe-server"}`) {
		t.Errorf("duty failure not counted:\n%s", metrics)
	}
	a.running()
}

// Sidecar mode: the service runs in another "container" (a process the test
// starts, in the same PID namespace); the agent finds it by name, follows it
// across a restart, its liveness follows the process, and startup starts
// over with the new one.
func TestSidecarFindsServiceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	// A service with a name of its own: a copy of sleep.
	svc := filepath.Join(dir, "fake-conductor")
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(svc, b, 0o755); err != nil {
		t.Fatal(err)
	}
	startSvc := func() *exec.Cmd {
		c := diesWithTest(exec.Command(svc, "300"))
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
sidecar:
  process: {name: fake-conductor}
probes:
  address: 127.0.0.1:%d
  socket: off
  checks:
    - name: svc
      process: {}
      probes: [startup, readiness, liveness]
      period: 200ms
      timeout: 100ms
      failureThreshold: 1
`, port))
	a := startAgent(t, plainEnv(), "--config", cfg, "sidecar")
	// The agent's own liveness (the native sidecar's probe) passes before
	// the service exists; the service's startup does not.
	waitStatus(t, base+"/livez/agent", 200, 10*time.Second)
	waitStatus(t, base+"/startupz", 503, 5*time.Second)

	first := startSvc()
	waitStatus(t, base+"/startupz", 200, 10*time.Second)
	waitStatus(t, base+"/readyz", 200, 5*time.Second)
	waitStatus(t, base+"/livez", 200, 5*time.Second)

	first.Process.Kill()
	first.Wait()
	body := waitStatus(t, base+"/livez?verbose", 503, 5*time.Second)
	if !strings.Contains(body, "svc") {
		t.Errorf("liveness reason: %q", body)
	}
	// Its container restarts: startup is the new process's to pass (the
	// kubelet's startup probe of the new container must not pass on the
	// old process's record), and readiness with it.
	waitStatus(t, base+"/startupz", 503, 5*time.Second)
	waitStatus(t, base+"/readyz", 503, 5*time.Second)
	startSvc()
	waitStatus(t, base+"/startupz", 200, 10*time.Second)
	waitStatus(t, base+"/readyz", 200, 5*time.Second)
	waitStatus(t, base+"/livez", 200, 10*time.Second)
	_, metrics := get(base + "/metrics")
	if !strings.Contains(metrics, "kolla_agent_service_restarts_total 1") {
		t.Errorf("restart not counted:\n%s", grepLines(metrics, "restarts"))
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(0)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The dependency check follows an API object with one watch: readiness
// follows the real EndpointSlice controller's view of a Service both ways,
// and nothing polls the API server while it does.
func TestDependencyCheckFollowsService(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "mariadb-0", "10.10.0.7", true)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: 127.0.0.1:%d
  socket: off
  checks:
    - name: db
      dependency: {wait: "service:mariadb"}
      period: 200ms
      timeout: 100ms
      failureThreshold: 1
`, port))
	start := time.Now()
	a := startAgent(t, agentEnv(t, ns), "--config", cfg, "run", "--", "sleep", "300")
	waitStatus(t, base+"/readyz", 200, 20*time.Second)
	synced := time.Now()

	setReady(t, ns, "mariadb-0", "10.10.0.7", false)
	body := waitStatus(t, base+"/readyz?verbose", 503, 10*time.Second)
	if !strings.Contains(body, "0 of 1 endpoints ready") {
		t.Errorf("reason does not say why:\n%s", body)
	}
	// Liveness does not include a dependency unless the check says so.
	if code, body := get(base + "/livez"); code != 200 {
		t.Errorf("/livez with the database down: %d %q", code, body)
	}
	setReady(t, ns, "mariadb-0", "10.10.0.7", true)
	waitStatus(t, base+"/readyz", 200, 10*time.Second)
	time.Sleep(3 * time.Second) // 15 checks' worth: any polling would show
	a.running()

	reqs, err := s.env.Requests("system:serviceaccount:"+ns+":kolla-agent", start)
	if err != nil {
		t.Fatal(err)
	}
	var later []string
	for _, r := range reqs {
		if r.Time.After(synced) {
			later = append(later, r.Verb+" "+r.RequestURI)
		}
	}
	if len(later) > 0 {
		t.Errorf("%d API requests after the watch synced, want none (one watch, no polling):\n%s", len(later), strings.Join(later, "\n"))
	}
}

// The agent SIGKILLed leaves its Unix socket behind; the next agent (the
// container restarted) takes the path over instead of failing, and the
// exec-probe client reaches it.
func TestProbeSocketAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: "off"
  socket: %s
  checks:
    - {name: alive, process: {}, probes: [liveness, readiness], period: 200ms, timeout: 100ms}
`, sock))
	first := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sleep", "300")
	eventually(t, "first agent ready", func() bool { _, code := probeCmd(t, "readiness", "--socket", sock); return code == 0 })
	orphan := childOf(t, first.cmd.Process.Pid)
	t.Cleanup(func() { syscall.Kill(orphan, syscall.SIGKILL) })
	first.cmd.Process.Kill()
	first.exit(10 * time.Second)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the killed agent's socket is gone (%v): the test no longer tests a stale socket", err)
	}
	if out, code := probeCmd(t, "liveness", "--socket", sock); code != 1 || !strings.Contains(out, "no agent answering") {
		t.Errorf("probe against a dead agent's socket: exit %d %q", code, out)
	}
	second := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sleep", "300")
	eventually(t, "second agent ready on the same socket", func() bool { _, code := probeCmd(t, "readiness", "--socket", sock); return code == 0 })
	// Without --socket the client takes probes.socket from the config, also
	// with --config given before the command.
	if out, err := exec.Command(s.bin, "--config", cfg, "probe", "readiness").CombinedOutput(); err != nil {
		t.Errorf("probe with the socket from the config: %v %q", err, out)
	}
	second.cmd.Process.Signal(syscall.SIGTERM)
	second.wantExit(143)
}

// A Unix socket that cannot be made (its directory cannot exist: a file is
// in the way, as a read-only /run would be) fails only its own duty: the
// kubelet's HTTP probes are served all the same.
func TestProbeSocketFailureSparesHTTP(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run"), nil, 0o644)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: 127.0.0.1:%d
  socket: %s/run/kolla-agent/agent.sock
  checks:
    - {name: alive, process: {}, probes: [readiness], period: 200ms, timeout: 100ms}
`, port, dir))
	a := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sleep", "300")
	waitStatus(t, base+"/readyz", 200, 20*time.Second)
	a.waitLog("duty=probe-socket")
	body := waitStatus(t, base+"/readyz?verbose", 200, 5*time.Second)
	_, metrics := get(base + "/metrics")
	if !strings.Contains(metrics, `kolla_agent_duty_failures_total{duty="probe-socket"}`) {
		t.Errorf("socket failure not counted:\n%s", grepLines(metrics, "duty"))
	}
	t.Logf("verbose while the socket fails:\n%s", body)
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(143)
}
