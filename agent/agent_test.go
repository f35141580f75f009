package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The config source: --config, else kubernetes-entrypoint variables, else
// agent.yaml at its default path (under --root), else the embedded default.
func TestLoadPlanSource(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "etc/kolla-agent/agent.yaml"), "dependencies:\n  wait: [\"file:/default\"]\n")
	write(t, filepath.Join(root, "explicit.yaml"), "namespace: nova\ndependencies:\n  timeout: 1m\n  wait: [\"file:/explicit\"]\n")
	write(t, filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount/namespace"), "glance\n")
	ke := map[string]string{"DEPENDENCY_SOCKET": "/run/x.sock", "NAMESPACE": "neutron"}

	for _, tc := range []struct {
		name              string
		opts              Options
		env               map[string]string
		source, ns, first string
		timeout           time.Duration
	}{
		{"explicit wins over entrypoint env", Options{ConfigPath: "/explicit.yaml"}, ke, "/explicit.yaml", "nova", "file:/explicit", time.Minute},
		{"entrypoint env: no timeout, as kubernetes-entrypoint", Options{}, ke, "kubernetes-entrypoint environment", "neutron", "socket:/run/x.sock", 0},
		{"default path, namespace from the service account", Options{}, nil, "/etc/kolla-agent/agent.yaml", "glance", "file:/default", 10 * time.Minute},
		{"timeout flag overrides", Options{Timeout: time.Second}, nil, "/etc/kolla-agent/agent.yaml", "glance", "file:/default", time.Second},
		{"NAMESPACE wins over the service account", Options{}, map[string]string{"NAMESPACE": "heat"}, "/etc/kolla-agent/agent.yaml", "heat", "file:/default", 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Root = root
			tc.opts.LookupEnv = lookup(tc.env)
			p, err := New(tc.opts).LoadPlan()
			if err != nil {
				t.Fatal(err)
			}
			if p.Source != tc.source || p.Namespace != tc.ns || p.Dependencies[0].String() != tc.first || p.Timeout != tc.timeout {
				t.Errorf("plan %+v, want source %q ns %q first %q timeout %v", p, tc.source, tc.ns, tc.first, tc.timeout)
			}
			if p.TerminationMessagePath != DefaultTerminationMessagePath {
				t.Errorf("termination path %q", p.TerminationMessagePath)
			}
		})
	}

	// No file anywhere: the embedded default, which waits for nothing.
	p, err := New(Options{Root: t.TempDir(), LookupEnv: lookup(nil)}).LoadPlan()
	if err != nil || p.Source != "embedded default" || len(p.Dependencies) != 0 || p.Namespace != "default" {
		t.Errorf("embedded default: %+v, %v", p, err)
	}
}

func TestLoadPlanErrorsAreConfigErrors(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "bad.yaml"), "dependencies: {wait: [\"nope\"]}\n")
	for _, tc := range []struct {
		name string
		opts Options
		env  map[string]string
		want string
	}{
		{"bad file", Options{ConfigPath: "/bad.yaml"}, nil, "bad.yaml: dependencies.wait[0].wait"},
		{"missing file", Options{ConfigPath: "/missing.yaml"}, nil, "missing.yaml"},
		{"bad env", Options{}, map[string]string{"DEPENDENCY_JOBS": "a:b:c"}, "DEPENDENCY_JOBS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Root = root
			tc.opts.LookupEnv = lookup(tc.env)
			_, err := New(tc.opts).LoadPlan()
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a ConfigError containing %q", err, tc.want)
			}
		})
	}
}

// A failed wait writes the termination message (under --root) and prints the
// final state of every dependency.
func TestWaitFailureReport(t *testing.T) {
	root := t.TempDir()
	var out strings.Builder
	a := New(Options{Root: root, TerminationMessagePath: "/dev/termination-log", LookupEnv: lookup(nil), Stderr: &out, Timeout: 2 * time.Second}) // the first look's answer in by then
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	p, err := a.WaitPlan([]string{"file:/never"})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Wait(t.Context(), p)
	if !errors.Is(err, discovery.ErrTimeout) {
		t.Fatalf("Wait: %v", err)
	}
	msg, rerr := os.ReadFile(filepath.Join(root, "dev/termination-log"))
	if rerr != nil || !strings.Contains(string(msg), "file:/never (waiting: /never does not exist)") {
		t.Errorf("termination message %q, %v", msg, rerr)
	}
	if !strings.Contains(out.String(), "DEPENDENCY") || !strings.Contains(out.String(), "file:/never") {
		t.Errorf("no summary:\n%s", out.String())
	}
	if !strings.Contains(string(msg), "timed out") {
		t.Errorf("termination message does not say it timed out: %q", msg)
	}
}

func TestTruncate(t *testing.T) {
	if got := truncate(strings.Repeat("x", 5000), 4096); len(got) != 4096 || !strings.HasSuffix(got, "...") {
		t.Errorf("len %d", len(got))
	}
	if truncate("short", 10) != "short" {
		t.Error("short string changed")
	}
}
