package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// The API server is killed (SIGKILL) and restarted while the agent waits: the agent
// reports it, resumes its watches, and finishes when the Job completes.
func TestAPIServerRestart(t *testing.T) {
	ns := namespace(t)
	mkJob(t, ns, "nova-db-sync", nil)
	mkService(t, ns, "nova-api", false, map[string]string{"app": "nova-api"})
	mkPod(t, ns, "nova-api-0", map[string]string{"app": "nova-api"})
	setReady(t, ns, "nova-api-0", "10.10.4.1", true)

	a := startAgent(t, agentEnv(t, ns), "wait", "--timeout", "5m", "job:nova-db-sync", "service:nova-api")
	a.waitLog("nova-db-sync (active")
	a.waitLog("dependency ready")

	if err := s.env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	a.waitLog("unhealthy")
	a.running()
	if err := s.env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, "nova-db-sync"); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// CoreDNS stops while the agent waits: it says DNS is unhealthy (not "not
// found"), and finishes once DNS is back.
func TestDNSOutage(t *testing.T) {
	ns := namespace(t)
	if err := s.env.StopDNS(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			s.env.StartDNS()
		}
	})
	mkService(t, ns, "memcached", false, map[string]string{"app": "memcached"})
	a := startAgent(t, agentEnv(t, ns), "wait", "--timeout", "5m", "dns:memcached")
	a.waitLog("DNS unhealthy")
	if strings.Contains(a.out.String(), "NXDOMAIN") {
		t.Errorf("a DNS outage was reported as NXDOMAIN:\n%s", a.out.String())
	}
	a.running()
	if err := s.env.StartDNS(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	a.wantExit(0)
}

// kubernetes-entrypoint drop-in: its variables, in the shapes openstack-helm
// charts emit, with no subcommand; COMMAND runs once everything is met.
func TestEntrypointDropIn(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "memcached", false, map[string]string{"app": "memcached"})
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkPod(t, ns, "memcached-0", map[string]string{"app": "memcached"})
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "memcached-0", "10.10.5.1", true)
	setReady(t, ns, "mariadb-0", "10.10.5.2", false)
	mkJob(t, ns, "keystone-db-sync", nil)
	mkJob(t, ns, "keystone-credential-setup", nil)
	mkPod(t, ns, "keystone-api-0", nil)
	out := filepath.Join(t.TempDir(), "started")

	env := append(agentEnv(t, ns),
		"POD_NAME=keystone-api-0",
		"DEPENDENCY_SERVICE="+ns+":memcached,"+ns+":mariadb",
		"DEPENDENCY_JOBS=keystone-db-sync,keystone-credential-setup",
		"DEPENDENCY_DAEMONSET=",
		"DEPENDENCY_CONTAINER=",
		"DEPENDENCY_POD_JSON=",
		"DEPENDENCY_CUSTOM_RESOURCE=",
		`COMMAND=sh -c 'echo "keystone started" > `+out+`'`,
	)
	a := startAgent(t, env)
	a.waitLog("0 of 1 endpoints ready")
	a.waitLog("keystone-credential-setup (active")
	for _, j := range []string{"keystone-db-sync", "keystone-credential-setup"} {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	a.running()
	if _, err := os.Stat(out); err == nil {
		t.Fatal("COMMAND ran before every dependency was met")
	}
	setReady(t, ns, "mariadb-0", "10.10.5.2", true)
	a.wantExit(0)
	b, err := os.ReadFile(out)
	if err != nil || string(b) != "keystone started\n" {
		t.Fatalf("COMMAND did not run as a shell would (quotes kept): %q, %v", b, err)
	}
}

// Malformed kubernetes-entrypoint input is exit 1, naming the variable and
// item, before anything is waited for.
func TestEntrypointBadInput(t *testing.T) {
	for _, tc := range []struct{ kv, want string }{
		{"DEPENDENCY_JOBS=openstack:", "DEPENDENCY_JOBS"},
		{`DEPENDENCY_POD_JSON=[{"labels":{"app":"x"},"requireSameNode":true}]`, "POD_NAME"},
		{`DEPENDENCY_JOBS_JSON=[{"nmae":"x"}]`, "DEPENDENCY_JOBS_JSON"},
		{`COMMAND=sh -c 'unbalanced`, "COMMAND"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			a := startAgent(t, []string{"PATH=" + os.Getenv("PATH"), "NAMESPACE=default", tc.kv})
			a.wantExit(1)
			if !strings.Contains(a.out.String(), tc.want) {
				t.Errorf("error does not name %s:\n%s", tc.want, a.out.String())
			}
		})
	}
}

// API cost, from the API server's audit log: at start exactly one LIST and
// one WATCH (from the list's resourceVersion) per dependency, each narrowed
// to its objects; then nothing while it waits.
//
// The same on every etcd. The agent's own list-then-watch
// (discovery/kube.go) never asks for a watch-list (sendInitialEvents), the
// one kind of request whose outcome depends on etcd: the API server streams
// it on an etcd with on-demand progress requests (the default 3.6) and
// refuses it on Debian's 3.4, where client-go's reflector would spend one
// refused attempt per dependency before its LIST and WATCH. etcd only
// changes where the API server answers the LIST from (its watch cache on
// 3.6, etcd itself on 3.4). `make test` runs both tests on both etcds
// (TESTENV_ETCD=debian).
func TestAPIRequestsWhileWaiting(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkService(t, ns, "memcached", false, map[string]string{"app": "memcached"})
	for _, j := range []string{"keystone-db-sync", "keystone-fernet-setup", "keystone-credential-setup"} {
		mkJob(t, ns, j, nil)
	}
	deps := []string{"service:mariadb", "service:memcached", "job:keystone-db-sync", "job:keystone-fernet-setup", "job:keystone-credential-setup"}
	start := time.Now()
	a := startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "5m"}, deps...)...)
	for _, d := range deps {
		a.waitLog("dependency=" + d + " state=waiting")
	}
	time.Sleep(10 * time.Second) // the measurement window: the agent waits, the log counts
	a.running()
	// All of it is counted, from the agent's start to the window's end: a
	// dependency's WATCH can reach the server a moment after the agent
	// logged what its LIST showed, and any request while waiting is one
	// too many for the exact count.
	reqs := auditOf(t, ns, start)
	t.Logf("%d requests to sync %d dependencies and wait %v", len(reqs), len(deps), time.Since(start).Round(time.Second))
	wantOnePerDependency(t, reqs, start, len(deps), "list", "watch")
}

// A pod restarting when everything is long ready, the commonest start of
// all: exactly one LIST per dependency, no WATCH, nothing else (the
// incumbent makes one GET per dependency); on every etcd, as above.
func TestAPIRequestsAllMet(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	deps := []string{"service:mariadb", "job:keystone-db-sync", "job:application=keystone,component=setup"}
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "mariadb-0", "10.10.7.1", true)
	mkJob(t, ns, "keystone-db-sync", nil)
	mkJob(t, ns, "keystone-fernet-setup", map[string]string{"application": "keystone", "component": "setup"})
	for _, j := range []string{"keystone-db-sync", "keystone-fernet-setup"} {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	// Until one agent has seen them all met, the controllers may still be
	// writing; the second agent's start is the measured one.
	startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "1m"}, deps...)...).wantExit(0)
	start := time.Now()
	startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "1m"}, deps...)...).wantExit(0)
	// The audit log is written a moment after the responses: read it once
	// it holds what is expected, then once more after a second, so a late
	// extra request counts too.
	var reqs []testenv.AuditRequest
	for deadline := time.Now().Add(10 * time.Second); len(reqs) < len(deps) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		reqs = auditOf(t, ns, start)
	}
	time.Sleep(time.Second)
	reqs = auditOf(t, ns, start)
	t.Logf("%d requests for %d dependencies already met", len(reqs), len(deps))
	wantOnePerDependency(t, reqs, start, len(deps), "list")
}

// wantOnePerDependency checks that reqs are exactly one request of each verb
// for each of n dependencies: n distinct narrowed collections (a path and
// its label or field selector), each asked once with each verb, and no
// other request.
func wantOnePerDependency(t *testing.T, reqs []testenv.AuditRequest, start time.Time, n int, verbs ...string) {
	t.Helper()
	count := map[string]map[string]int{} // verb -> collection -> requests
	for _, v := range verbs {
		count[v] = map[string]int{}
	}
	for _, r := range reqs {
		line := r.Verb + " " + r.RequestURI
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Errorf("request %s: %v", line, err)
			continue
		}
		q := u.Query()
		if q.Get("fieldSelector") == "" && q.Get("labelSelector") == "" {
			t.Errorf("request not narrowed to its objects: %s", line)
		}
		byColl, ok := count[r.Verb]
		if !ok {
			t.Errorf("unexpected request %s", line)
			continue
		}
		byColl[u.Path+"?"+q.Get("labelSelector")+"&"+q.Get("fieldSelector")]++
	}
	for _, v := range verbs {
		total := 0
		for _, c := range count[v] {
			total += c
		}
		if len(count[v]) != n || total != n {
			t.Errorf("%d %s requests for %d collections, want exactly one for each of %d dependencies:\n%s", total, v, len(count[v]), n, requestLines(reqs, start))
		}
	}
}

// requestLines lists reqs, each with when it came after start.
func requestLines(reqs []testenv.AuditRequest, start time.Time) string {
	lines := make([]string, len(reqs))
	for i, r := range reqs {
		lines[i] = fmt.Sprintf("+%v %s %s", r.Time.Sub(start).Round(time.Millisecond), r.Verb, r.RequestURI)
	}
	return strings.Join(lines, "\n")
}

func auditOf(t *testing.T, ns string, since time.Time) []testenv.AuditRequest {
	t.Helper()
	reqs, err := s.env.Requests("system:serviceaccount:"+ns+":kolla-agent", since)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// The API server is killed while a dependency check follows a Service:
// readiness keeps the last known state (an API outage must not make every
// pod unready), says why, and follows the Service again once the API server
// is back.
func TestDependencyCheckSurvivesAPIServerKill(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "rabbitmq", false, map[string]string{"app": "rabbitmq"})
	mkPod(t, ns, "rabbitmq-0", map[string]string{"app": "rabbitmq"})
	setReady(t, ns, "rabbitmq-0", "10.10.5.1", true)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: 127.0.0.1:%d
  socket: "off"
  checks:
    - {name: broker, dependency: {wait: "service:rabbitmq"}, period: 200ms, timeout: 100ms, failureThreshold: 1}
`, port))
	a := startAgent(t, agentEnv(t, ns), "--config", cfg, "run", "--", "sleep", "300")
	waitStatus(t, base+"/readyz", 200, 20*time.Second)

	if err := s.env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(base + "/readyz?verbose")
		if code != 200 {
			t.Fatalf("readiness failed while the API server is down: %d\n%s", code, body)
		}
		if strings.Contains(body, "last known") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API outage is not shown:\n%s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	setReady(t, ns, "rabbitmq-0", "10.10.5.1", false)
	body := waitStatus(t, base+"/readyz?verbose", 503, 60*time.Second)
	if !strings.Contains(body, "0 of 1 endpoints ready") {
		t.Errorf("after the API server came back: %s", body)
	}
	a.running()
}
