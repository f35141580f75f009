package configcheck

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config check reports every problem of agent.yaml, of kolla's config.json
// and of the templates they name at once, each with its file and field, and
// writes nothing.
func TestCheckConfigListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	write(t, cfg, `dependencies:
  timeout: soon
render:
  - {src: /var/lib/kolla/config_files/a.conf.tmpl, dest: /etc/a.conf}
  - {src: /var/lib/kolla/config_files/missing.tmpl, dest: /etc/b.conf}
bootstrap:
  mode: create
  name: x
  job: /var/lib/kolla/config_files/job.yaml
probes:
  checks:
    - {name: api, tcp: {address: "127.0.0.1:1"}, probes: [readyness]}
`)
	// Beside agent.yaml, as the ConfigMap holds them: one template that does
	// not parse, a Job template with an unknown function.
	write(t, filepath.Join(dir, "a.conf.tmpl"), "[DEFAULT]\nx = {{ podIP \n")
	write(t, filepath.Join(dir, "job.yaml"), "command: {{ nosuch }}\n")
	kolla := filepath.Join(dir, "config.json")
	write(t, kolla, `{"command": "x", "config_files": [{"source": "/a", "dest": "/b", "owner": "", "perm": "9"}]}`)

	var out bytes.Buffer
	err := Check(Options{Config: cfg, Kolla: kolla}, &out)
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("want an *Error, got %v", err)
	}
	for _, want := range []string{
		cfg + ": dependencies.timeout:",
		cfg + ": probes.checks[0].probes[0]:",
		cfg + ": render[0].src: " + filepath.Join(dir, "a.conf.tmpl") + ":3:1: unclosed action started at line 2",
		cfg + ": bootstrap.job: " + filepath.Join(dir, "job.yaml"),
		kolla + ": config_files[0].perm",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "missing.tmpl") {
		t.Errorf("a template that is in neither place is not a problem here:\n%v", err)
	}
	if out.Len() != 0 {
		t.Errorf("a summary printed for an invalid config:\n%s", out.String())
	}
}

func TestCheckConfigSummary(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	write(t, cfg, `dependencies:
  wait: [service:mariadb, {wait: "tcp:db:3306", timeout: 1m}]
probes:
  checks:
    - {name: api, http: {url: "http://user:secret@127.0.0.1:5000/v3"}, probes: [startup, readiness]}
reload:
  signal: usr1
logs:
  files: [{path: /var/log/kolla/keystone/*.log}]
  sink: {type: forward, address: 127.0.0.1:24224}
`)
	var out bytes.Buffer
	if err := Check(Options{Config: cfg}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		cfg + ": valid",
		"dependencies: 2, within 10m0s",
		"tcp:db:3306 (within 1m)",
		"api: http http://user:xxxxx@127.0.0.1:5000/v3 for startup, readiness",
		"action signal USR1",
		"logs: 1 file patterns to forward 127.0.0.1:24224",
		"bootstrap: none",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "secret") {
		t.Errorf("the summary shows a password:\n%s", out.String())
	}
}

// An explicit config that is not there is a problem; no config at the
// default path is the embedded default, valid.
func TestCheckConfigMissing(t *testing.T) {
	root := t.TempDir()
	err := Check(Options{Config: filepath.Join(root, "nope.yaml")}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "nope.yaml: no such file") {
		t.Errorf("got %v", err)
	}
	var out bytes.Buffer
	if err := Check(Options{Root: root}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "embedded default") {
		t.Errorf("got:\n%s", out.String())
	}
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
