package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	a.waitLog("nova-db-sync (Running")
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
	a.waitLog("timeout=none") // kubernetes-entrypoint waits for ever
	a.waitLog("0 of 1 endpoints ready")
	a.waitLog("keystone-credential-setup (Running")
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
	a := startAgent(t, agentEnv(t, ns), "--log-level", "debug", "--config", cfg, "run", "--", "sleep", "300")
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
	// The EndpointSlice controller's own watches come back on their own
	// schedule (up to a minute after a restart): wait for the slice first,
	// so that the agent's time is measured from the change it must see.
	eventually(t, "the EndpointSlice controller marking rabbitmq-0 not ready", func() bool {
		l, err := client().DiscoveryV1().EndpointSlices(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=rabbitmq"})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		for _, sl := range l.Items {
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					return false
				}
			}
		}
		return true
	})
	body := waitStatus(t, base+"/readyz?verbose", 503, 20*time.Second)
	if !strings.Contains(body, "0 of 1 endpoints ready") {
		t.Errorf("after the API server came back: %s", body)
	}
	a.running()
}
