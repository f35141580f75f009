package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kolla-agent/kolla-agent/probes"
)

// The secrets a pod hands the agent, each through another input. None may
// come out in the log, the termination message, an Event, a metric or a
// probe answer; the agent must still use each (the wait reaches the URL,
// the rendered file holds the password).
const (
	urlPassword   = "Url5ecretPW"  // in a dependency's and a check's URL
	urlToken      = "Qu3ryT0ken"   // in a URL's query
	envPassword   = "Env5ecretPW"  // in the environment (DB_PASSWORD)
	filePassword  = "F1le5ecretPW" // in a Secret's file, read by a template
	execPassword  = "Ex3c5ecretPW" // printed by an exec check
	argvPassword  = "Argv5ecretPW" // in a bootstrap command's arguments
	shownPassword = "***"
)

var allSecrets = []string{urlPassword, urlToken, envPassword, filePassword, execPassword, argvPassword}

// A dependency URL with a password and a token: the wait uses them (the
// server sees them), and the log, the termination message, the Event and
// the /metrics label show the URL without them.
func TestNoSecretInOutputsWait(t *testing.T) {
	ns := namespace(t)
	mkPod(t, ns, "keystone-0", nil)
	var seen string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, p, ok := r.BasicAuth(); ok {
			seen = p
		}
		seen += " " + r.URL.Query().Get("token")
		http.Error(w, "not yet: DB_PASSWORD="+execPassword, http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	dep := fmt.Sprintf("http://admin:%s@%s/v3?token=%s", urlPassword, srv.Listener.Addr(), urlToken)
	term := filepath.Join(t.TempDir(), "termination-log")
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := startAgent(t, append(agentEnv(t, ns), "POD_NAME=keystone-0"),
		"--termination-log", term, "--metrics-addr", metrics, "wait", "--timeout", "4s", dep)
	var body string
	eventually(t, "the dependency's metric", func() bool {
		_, body = get("http://" + metrics + "/metrics")
		return strings.Contains(body, "kolla_agent_dependency_resolved")
	})
	a.wantExit(2)
	if seen != urlPassword+" "+urlToken {
		t.Errorf("the server saw %q: the wait did not use the URL's token", seen)
	}
	msg, _ := os.ReadFile(term)
	evs, err := client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var events strings.Builder
	for _, e := range evs.Items {
		events.WriteString(e.Reason + ": " + e.Message + "\n")
	}
	outputs := map[string]string{"log": a.out.String(), "termination message": string(msg), "events": events.String(), "metrics": body}
	for what, out := range outputs {
		noSecretIn(t, what, out)
	}
	shown := fmt.Sprintf("http://admin:***@%s/v3?token=***", srv.Listener.Addr())
	for _, what := range []string{"log", "termination message", "events", "metrics"} {
		if !strings.Contains(outputs[what], shown) {
			t.Errorf("%s does not name the dependency as %s:\n%s", what, shown, outputs[what])
		}
	}
}

// `kolla-agent run` with a secret in each input: the environment and a
// Secret's file rendered by a template (written 0600), an exec check that
// prints a password and fails, an http check and a dependency whose URLs
// hold credentials. The probe answers, /metrics, the log and the
// termination message show none of them; the exec output is in the log,
// redacted.
func TestNoSecretInOutputsRun(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"secrets", "templates", "etc"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	write(t, filepath.Join(dir, "secrets/db-password"), filePassword+"\n")
	write(t, filepath.Join(dir, "templates/app.conf.tmpl"),
		"[database]\nconnection = mysql+pymysql://app:{{ secret \""+dir+"/secrets/db-password\" }}@db/app\nenv_password = {{ env \"DB_PASSWORD\" }}\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	// The check's server: 503 with the credentials in the URL.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	port := freePort(t)
	sock := filepath.Join(dir, "agent.sock")
	term := filepath.Join(dir, "termination-log")
	cfg := agentYAML(t, fmt.Sprintf(`
dependencies:
  wait: ["http://admin:%[1]s@%[2]s/?token=%[3]s"]
render:
  - {src: %[4]s/templates/app.conf.tmpl, dest: %[4]s/etc/app.conf}
renderOptions:
  allowFiles: [%[4]s/secrets]
probes:
  address: 0.0.0.0:%[5]d
  socket: %[6]s
  checks:
    - name: script
      exec: {command: "sh -c 'echo connecting; echo DB_PASSWORD=$DB_PASSWORD; echo password=%[7]s; exit 1'"}
      probes: [readiness]
      period: 200ms
      failureThreshold: 1
    - name: api
      http: {url: "http://admin:%[1]s@%[8]s/v3?token=%[3]s"}
      probes: [readiness]
      period: 200ms
      failureThreshold: 1
`, urlPassword, up.Listener.Addr(), urlToken, dir, port, sock, execPassword, down.Listener.Addr()))
	env := append(plainEnv(), "DB_PASSWORD="+envPassword)
	a := startAgent(t, env, "--config", cfg, "--termination-log", term, "run", "--", "sleep", "60")
	loop := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitStatus(t, loop+"/livez", 200, 30*time.Second)

	// Live comes first (probes serve while the agent waits); the config
	// is rendered once the dependency answers, written whole (a rename).
	rendered := filepath.Join(dir, "etc/app.conf")
	eventually(t, "the config rendered", func() bool { _, err := os.Stat(rendered); return err == nil })
	b, err := os.ReadFile(rendered)
	if err != nil || !strings.Contains(string(b), filePassword) || !strings.Contains(string(b), envPassword) {
		t.Fatalf("the rendered file %q, %v: the template must use the secrets", b, err)
	}
	if fi, _ := os.Stat(rendered); fi.Mode().Perm() != 0o600 {
		t.Errorf("the rendered file of a template that called secret is %v, want 0600", fi.Mode().Perm())
	}

	outputs := map[string]string{}
	eventually(t, "both checks failing", func() bool {
		_, body := get(loop + "/readyz?verbose")
		outputs["readyz from loopback"] = body
		return strings.Contains(body, "[-]script fail") && strings.Contains(body, "[-]api fail")
	})
	for _, target := range []string{"/readyz", "/readyz?format=json", "/readyz/script?verbose", "/readyz/api?verbose", "/metrics"} {
		_, outputs[target+" from loopback"] = get(loop + target)
	}
	verbose, _, err := probes.Ask(ctxT(t), sock, probes.Readiness, true)
	if err != nil {
		t.Fatal(err)
	}
	outputs["readyz over the socket"] = verbose
	// Loopback and the socket see reasons (no secret in them); the pod
	// network sees names and states only.
	if !strings.Contains(verbose, "HTTP 503 from http://admin:***@") || !strings.Contains(verbose, "exit 1") {
		t.Errorf("the socket's verbose answer lacks the reasons:\n%s", verbose)
	}
	if ip := nonLoopbackIP(); ip != "" {
		for _, target := range []string{"/readyz", "/readyz?verbose", "/readyz?format=json"} {
			_, body := get(fmt.Sprintf("http://%s%s", net.JoinHostPort(ip, fmt.Sprint(port)), target))
			outputs[target+" from "+ip] = body
			// "HTTP 503", not "503": a check's age or time in the JSON
			// answer (3.850362ms) may hold those digits.
			if strings.Contains(body, "HTTP 503") || strings.Contains(body, "exit 1") || strings.Contains(body, down.Listener.Addr().String()) {
				t.Errorf("%s from the pod network shows a reason: %q", target, body)
			}
		}
	} else {
		t.Log("no address but loopback on this machine: the pod-network view is covered by probes' TestServerPublic only")
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.exit(30 * time.Second)
	msg, _ := os.ReadFile(term)
	outputs["termination message"] = string(msg)
	outputs["log"] = a.out.String()
	for what, out := range outputs {
		noSecretIn(t, what, out)
	}
	if m := outputs["/metrics from loopback"]; !strings.Contains(m, fmt.Sprintf(`dependency="http://admin:***@%s/?token=***"`, up.Listener.Addr())) {
		t.Errorf("/metrics lacks the dependency, redacted:\n%s", m)
	}
	// The exec output is in the log (that is where an operator looks), with
	// the values named like secrets hidden.
	if !strings.Contains(outputs["log"], "connecting") || !strings.Contains(outputs["log"], "DB_PASSWORD=***") {
		t.Errorf("the log lacks the exec check's redacted output:\n%s", outputs["log"])
	}
}

// A bootstrap command's arguments may come from a template that read a
// Secret: a failure names the program, not its arguments, in the log and
// the termination message; its own output passes through (it is the
// command's, as in any container log) but the termination message's copy
// is redacted.
func TestNoSecretInOutputsBootstrapCommand(t *testing.T) {
	term := filepath.Join(t.TempDir(), "termination-log")
	a := startAgent(t, plainEnv(), "--termination-log", term, "bootstrap", "--",
		"sh", "-c", `echo syncing; echo "connecting with DB_PASSWORD=$2" >&2; exit 3`, "db-sync", "--password", argvPassword)
	a.wantExit(3)
	msg, _ := os.ReadFile(term)
	if !strings.Contains(string(msg), "bootstrap command sh exited with 3") || !strings.Contains(string(msg), "syncing") ||
		!strings.Contains(string(msg), "DB_PASSWORD=***") {
		t.Errorf("termination message %q: want the program, its code and its last output, redacted", msg)
	}
	noSecretIn(t, "termination message", string(msg))
	// The command's own output passes through (it printed the secret
	// itself); the agent's lines must not show its arguments.
	for _, l := range strings.Split(a.out.String(), "\n") {
		if strings.HasPrefix(l, "time=") {
			noSecretIn(t, "the agent's log", l)
		}
	}
	if !strings.Contains(a.out.String(), "connecting with DB_PASSWORD="+argvPassword) {
		t.Errorf("the command's own output did not pass through:\n%s", a.out.String())
	}
}

func noSecretIn(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range allSecrets {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the secret %s:\n%s", what, s, out)
		}
	}
}

// nonLoopbackIP is an address of this machine that is not loopback: a
// connection to it comes from it, as the kubelet's comes from the node.
func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
