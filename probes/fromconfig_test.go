package probes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// Every check type of agent.yaml becomes the probes package's checker with
// its timing and probes; the sidecar gets a liveness process check unless
// it has one.
func TestSpecsFrom(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nova.conf"), []byte("[DEFAULT]\ntransport_url = rabbit://nova:secret@127.0.0.1:5672/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("agent.yaml", []byte(`
probes:
  checks:
    - {name: p, process: {}, probes: [liveness]}
    - {name: t, tcp: {address: "127.0.0.1:1"}, period: 5s, timeout: 1s, failureThreshold: 4, successThreshold: 2}
    - {name: h, http: {url: "http://127.0.0.1:1/v3"}}
    - {name: e, exec: {command: "true"}, probes: [startup, readiness]}
    - {name: e2, exec: {command: ["sh", "-c", "exit 0"]}}
    - {name: c, connections: {ports: [5672]}}
    - {name: f, file: {path: /tmp/heartbeat, maxAge: 1m}}
    - {name: d, dependency: {wait: "tcp:127.0.0.1:1"}}
    - {name: r, rpc: {configFile: `+filepath.Join(dir, "nova.conf")+`, topic: conductor, exchange: nova}}
`))
	if err != nil {
		t.Fatal(err)
	}
	w, err := discovery.New(discovery.Config{})
	if err != nil {
		t.Fatal(err)
	}
	specs, err := SpecsFrom(c.Probes.Checks, Means{PIDs: lcPID(1), Spawner: OSSpawner{}, Dependencies: w})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"p": "*probes.ProcessCheck", "t": "*probes.TCPCheck", "h": "*probes.HTTPCheck", "e": "*probes.ExecCheck",
		"e2": "*probes.ExecCheck", "c": "*probes.ConnectionsCheck", "f": "*probes.FileCheck", "d": "*probes.DependencyCheck", "r": "*probes.RPC"}
	if len(specs) != len(want) {
		t.Fatalf("%d specs, want %d", len(specs), len(want))
	}
	for _, s := range specs {
		if got := typeName(s.Checker); got != want[s.Name] {
			t.Errorf("check %s: %s, want %s", s.Name, got, want[s.Name])
		}
		if cl, ok := s.Checker.(Closer); ok {
			cl.Close()
		}
	}
	tcp := specs[1]
	if tcp.Period != 5*time.Second || tcp.Timeout != time.Second || tcp.FailureThreshold != 4 || tcp.SuccessThreshold != 2 || len(tcp.Probes) != 1 || tcp.Probes[0] != Readiness {
		t.Errorf("timing or probes lost: %+v", tcp)
	}
	if e := specs[3]; len(e.Probes) != 2 || e.Probes[0] != Startup {
		t.Errorf("probes list lost: %+v", e.Probes)
	}

	// Sidecar: a liveness process check is added when the config has none.
	c2, _ := config.Parse("agent.yaml", []byte("probes:\n  checks:\n    - {name: t, tcp: {address: \"127.0.0.1:1\"}}\n"))
	specs, err = SpecsFrom(c2.Probes.Checks, Means{PIDs: lcPID(1), Sidecar: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[1].Name != "process" || specs[1].Probes[0] != Liveness {
		t.Errorf("sidecar specs: %+v", specs)
	}
	// Not when it has its own, nor without a process to check, nor under run.
	c3, _ := config.Parse("agent.yaml", []byte("probes:\n  checks:\n    - {name: own, process: {}}\n"))
	for _, tc := range []struct {
		checks []config.Check
		m      Means
	}{
		{c3.Probes.Checks, Means{PIDs: lcPID(1), Sidecar: true}},
		{c2.Probes.Checks, Means{Sidecar: true}},
		{c2.Probes.Checks, Means{PIDs: lcPID(1)}},
	} {
		if specs, err := SpecsFrom(tc.checks, tc.m); err != nil || len(specs) != 1 {
			t.Errorf("%+v: %d specs (%v), want only the config's", tc.m, len(specs), err)
		}
	}
}

// Bad inputs that only show when the checks are built name the field.
func TestSpecsFromBadInput(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"probes:\n  checks:\n    - {name: p, process: {}}\n", "probes.checks[0].process: there is no service process"},
		{"probes:\n  checks:\n    - {name: c, connections: {ports: [3306]}}\n", "probes.checks[0].connections: there is no service process"},
		{"probes:\n  checks:\n    - {name: h, http: {url: \"https://x/\", caFile: /nonexistent/ca.pem}}\n", "probes.checks[0].http"},
		{"probes:\n  checks:\n    - {name: r, rpc: {configFile: /nonexistent/nova.conf, topic: conductor}}\n", "probes.checks[0].rpc"},
		{"probes:\n  checks:\n    - {name: r, rpc: {topic: conductor}}\n", "probes.checks[0].rpc: give configFile, configFiles, configDirs or transportURL (the agent does not start the service here"},
		{"probes:\n  checks:\n    - {name: r, rpc: {topic: conductor, configDirs: [/nonexistent/nova.conf.d]}}\n", "/nonexistent/nova.conf.d"},
		{"probes:\n  checks:\n    - {name: t, tcp: {address: \"a:1\"}}\n    - {name: d, dependency: {wait: \"tcp:a:1\"}}\n", "probes.checks[1].dependency: no means to check dependencies"},
	} {
		c, err := config.Parse("agent.yaml", []byte(tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		_, err = SpecsFrom(c.Probes.Checks, Means{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.yaml, err, tc.want)
		}
	}
}

// An rpc check that names no config reads the files the service does,
// from its command line, in oslo.config's order, or at oslo.config's
// defaults for the program's name.
func TestRPCCheckFromCommandLine(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "nova.conf"), []byte("[DEFAULT]\nhost = c1\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "nova.conf.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "nova.conf.d", "50-rabbit.conf"), []byte("[DEFAULT]\ntransport_url = rabbit://u:p@127.0.0.1:1/\n"), 0o644)
	c, err := config.Parse("agent.yaml", []byte("probes:\n  checks:\n    - {name: r, rpc: {topic: conductor}, probes: [readiness]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// No config on the command line and none at oslo.config's defaults
	// (an empty root): the error says where it looked.
	if _, err := SpecsFrom(c.Probes.Checks, Means{Root: t.TempDir(), Argv: []string{"nova-conductor"}}); err == nil || !strings.Contains(err.Error(), "none of oslo.config's default files for nova-conductor exists") {
		t.Fatalf("a command line without config: %v", err)
	}
	// A bare nova-conductor reads /etc/nova/nova.conf and nova.conf.d.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/nova/nova.conf.d"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/nova/nova.conf"), []byte("[DEFAULT]\nhost = c1\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/nova/nova.conf.d/50-rabbit.conf"), []byte("[DEFAULT]\ntransport_url = rabbit://u:p@127.0.0.1:1/\n"), 0o644)
	if specs, err := SpecsFrom(c.Probes.Checks, Means{Root: root, Argv: []string{"nova-conductor"}}); err != nil || len(specs) != 1 {
		t.Fatalf("oslo.config's defaults: %v", err)
	}
	os.Remove(filepath.Join(root, "etc/nova/nova.conf.d/50-rabbit.conf"))
	if _, err := SpecsFrom(c.Probes.Checks, Means{Root: root, Argv: []string{"nova-conductor"}}); err == nil || !strings.Contains(err.Error(), "etc/nova/nova.conf: [DEFAULT] transport_url: missing") {
		t.Fatalf("oslo.config's default nova.conf without transport_url: %v", err)
	}
	argv := []string{"nova-conductor", "--config-file=" + filepath.Join(dir, "nova.conf")}
	if _, err := SpecsFrom(c.Probes.Checks, Means{Argv: argv}); err == nil || !strings.Contains(err.Error(), "nova.conf: [DEFAULT] transport_url: missing") {
		t.Fatalf("nova.conf alone: %v", err)
	}
	argv = append(argv, "--config-dir", filepath.Join(dir, "nova.conf.d"))
	specs, err := SpecsFrom(c.Probes.Checks, Means{Argv: argv})
	if err != nil || len(specs) != 1 {
		t.Fatalf("with the snippet: %v", err)
	}
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }

// The dependencies of dependency checks, for the one waiter that follows
// them all.
func TestDependencies(t *testing.T) {
	c, err := config.Parse("agent.yaml", []byte("probes:\n  checks:\n    - {name: t, tcp: {address: \"a:1\"}}\n    - {name: d, dependency: {wait: \"tcp:db:3306\"}}\n    - {name: s, dependency: {wait: \"service:rabbitmq\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	deps := Dependencies(c.Probes.Checks)
	if len(deps) != 2 || deps[0].String() != "tcp:db:3306" || deps[1].String() != "service:rabbitmq" {
		t.Errorf("dependencies: %v", deps)
	}
	if deps := Dependencies(nil); deps != nil {
		t.Errorf("no checks: %v", deps)
	}
}

// The probe server's listeners: defaulted when there are checks, none
// when "off" or, without checks, not given.
func TestListeners(t *testing.T) {
	checks := []config.Check{{Name: "t"}}
	for _, tc := range []struct {
		pc         config.Probes
		addr, sock string
	}{
		{config.Probes{}, "", ""},
		{config.Probes{Checks: checks}, config.DefaultProbeAddress, config.DefaultProbeSocket},
		{config.Probes{Address: ":9000", Socket: "/run/p.sock"}, ":9000", "/run/p.sock"},
		{config.Probes{Checks: checks, Address: "off"}, "", config.DefaultProbeSocket},
		{config.Probes{Checks: checks, Socket: "off"}, config.DefaultProbeAddress, ""},
		{config.Probes{Address: "off", Socket: "off"}, "", ""},
	} {
		if addr, sock := Listeners(&tc.pc); addr != tc.addr || sock != tc.sock {
			t.Errorf("%+v: %q, %q; want %q, %q", tc.pc, addr, sock, tc.addr, tc.sock)
		}
	}
}
