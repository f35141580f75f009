package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `kolla-agent init` with agent.yaml: API and local dependencies together,
// per-dependency timeouts, and the wait's metrics scraped while it waits.
func TestInitWithConfigAndMetrics(t *testing.T) {
	ns := namespace(t)
	mkJob(t, ns, "placement-db-sync", nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "fernet-keys")
	cfg := filepath.Join(dir, "agent.yaml")
	yaml := fmt.Sprintf(`
namespace: %s
dependencies:
  timeout: 2m
  wait:
    - job:placement-db-sync
    - {wait: "file:%s", timeout: 90s}
`, ns, file)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	env := agentEnv(t, ns)
	a := startAgent(t, env, "init", "--config", cfg, "--metrics-addr", addr)
	a.waitLog("placement-db-sync (Running")
	a.waitLog("does not exist")

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`kolla_agent_dependency_waiting{dependency="job:placement-db-sync",type="job"} 1`,
		`kolla_agent_dependency_resolved{dependency="file:` + file + `",type="file"} 0`,
		`kolla_agent_dependency_wait_seconds{dependency="job:placement-db-sync",type="job"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, "placement-db-sync"); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// Bad input to init and wait is exit 1 naming the file and field, or the
// argument, and nothing is waited for.
func TestBadInputExit1(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "agent.yaml")
	os.WriteFile(bad, []byte("dependencies:\n  wait:\n    - service:mariadb\n    - {wait: \"tcp:db:3306\", timeout: soon}\n"), 0o600)
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "--config", bad}, bad + ": dependencies.wait[1].timeout"},
		{[]string{"init", "--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"wait", "tcp:db"}, `argument 1: dependency \"tcp:db\": want tcp:HOST:PORT`},
		{[]string{"wait"}, "no dependencies"},
		{[]string{"wait", "service:mariadb"}, "needs the Kubernetes API"},
		{[]string{"--log-format", "xml", "wait", "file:/x"}, "--log-format"},
		{[]string{"frobnicate"}, "unknown command"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			a := startAgent(t, env, tc.args...)
			a.wantExit(1)
			if !strings.Contains(a.out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, a.out.String())
			}
		})
	}
}
