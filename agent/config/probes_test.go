package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseProbes(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`
probes:
  address: ":8095"
  socket: off
  drainFile: /var/lib/kolla-agent/drain
  checks:
    - name: api
      http: {url: "http://127.0.0.1:5000/v3", expectStatus: [200]}
      probes: [startup, readiness]
      period: 10s
      timeout: 2s
      failureThreshold: 3
      successThreshold: 1
    - name: heartbeat
      file: {path: /var/run/hb, maxAge: 1m}
sidecar:
  process: {name: keystone}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Probes.Socket != "off" {
		t.Errorf("a bare YAML off: socket = %q, want off", c.Probes.Socket)
	}
	ch := c.Probes.Checks[1]
	period, timeout, failure, success := ch.Period.Duration(), ch.Timeout.Duration(), ch.FailureThreshold, ch.SuccessThreshold
	if period != DefaultCheckPeriod || timeout != DefaultCheckTimeout || failure != 3 || success != 1 {
		t.Errorf("defaults: %v %v %d %d", period, timeout, failure, success)
	}
	if got := c.Probes.Checks[1].ProbeList(); len(got) != 1 || got[0] != "readiness" {
		t.Errorf("default probes %v", got)
	}
	if !c.SteadyState() || c.Sidecar.Process.Name != "keystone" {
		t.Errorf("%+v", c)
	}
	// A period below the default timeout lowers the default timeout.
	c2, err := Parse("a.yaml", []byte("probes:\n  checks:\n    - {name: x, tcp: {address: \"a:1\"}, period: 500ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if timeout := c2.Probes.Checks[0].Timeout.Duration(); timeout != 500*time.Millisecond {
		t.Errorf("timeout %v, want the period", timeout)
	}
}

// Each bad probes or sidecar input is refused with the file and the field.
func TestParseProbesBad(t *testing.T) {
	ck := func(s string) string { return "probes:\n  checks:\n    - " + s + "\n" }
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad address", "probes:\n  address: \"8095\"\n", `probes.address: "8095" is not HOST:PORT`},
		{"relative socket", "probes:\n  socket: agent.sock\n", "probes.socket: \"agent.sock\" is not an absolute path"},
		{"relative drain file", "probes:\n  drainFile: drain\n", "probes.drainFile"},
		{"no name", ck("{tcp: {address: \"a:1\"}}"), "probes.checks[0].name: empty"},
		{"bad name", ck("{name: \"API!\", tcp: {address: \"a:1\"}}"), "probes.checks[0].name: \"API!\""},
		{"reserved name", ck("{name: agent, tcp: {address: \"a:1\"}}"), "built-in"},
		{"duplicate name", "probes:\n  checks:\n    - {name: a, tcp: {address: \"a:1\"}}\n    - {name: a, tcp: {address: \"a:1\"}}\n", "probes.checks[1].name: \"a\" already used by probes.checks[0]"},
		{"unknown probe", ck("{name: a, tcp: {address: \"a:1\"}, probes: [ready]}"), "probes.checks[0].probes[0]: \"ready\""},
		{"bad period", ck("{name: a, tcp: {address: \"a:1\"}, period: often}"), "probes.checks[0].period: \"often\""},
		{"tiny period", ck("{name: a, tcp: {address: \"a:1\"}, period: 1ms}"), "probes.checks[0].period: 1ms is below"},
		{"zero timeout", ck("{name: a, tcp: {address: \"a:1\"}, timeout: 0s}"), "probes.checks[0].timeout: must be above 0"},
		{"timeout over period", ck("{name: a, tcp: {address: \"a:1\"}, period: 1s, timeout: 2s}"), "probes.checks[0].timeout: 2s is longer than the period 1s"},
		{"negative threshold", ck("{name: a, tcp: {address: \"a:1\"}, failureThreshold: -1}"), "probes.checks[0].failureThreshold: negative"},
		{"no type", ck("{name: a}"), "probes.checks[0]: no check type"},
		{"two types", ck("{name: a, tcp: {address: \"a:1\"}, process: {}}"), "more than one check type (process, tcp)"},
		{"unknown type", ck("{name: a, grpc: {}}"), `unknown field "grpc"`},
		{"tcp address", ck("{name: a, tcp: {address: db}}"), "probes.checks[0].tcp.address: \"db\" is not HOST:PORT"},
		{"http url", ck("{name: a, http: {url: \"ftp://x\"}}"), "probes.checks[0].http.url"},
		{"http status", ck("{name: a, http: {url: \"http://x/\", expectStatus: [99]}}"), "probes.checks[0].http.expectStatus[0]: 99"},
		{"http regex", ck("{name: a, http: {url: \"http://x/\", bodyRegex: \"(\"}}"), "probes.checks[0].http.bodyRegex"},
		{"exec empty", ck("{name: a, exec: {command: \"\"}}"), "probes.checks[0].exec.command: empty"},
		{"exec bad quoting", ck("{name: a, exec: {command: \"sh -c 'x\"}}"), "probes.checks[0].exec.command"},
		{"exec wrong type", ck("{name: a, exec: {command: 3}}"), "want a string or a list of strings"},
		{"connections no ports", ck("{name: a, connections: {ports: []}}"), "probes.checks[0].connections.ports: empty"},
		{"connections bad port", ck("{name: a, connections: {ports: [70000]}}"), "probes.checks[0].connections.ports[0]: 70000"},
		{"connections negative min", ck("{name: a, connections: {ports: [1], min: -1}}"), "probes.checks[0].connections.min: negative"},
		{"file relative", ck("{name: a, file: {path: hb, maxAge: 1m}}"), "probes.checks[0].file.path"},
		{"file no maxAge", ck("{name: a, file: {path: /hb}}"), "probes.checks[0].file.maxAge: required"},
		{"file bad maxAge", ck("{name: a, file: {path: /hb, maxAge: old}}"), "probes.checks[0].file.maxAge: \"old\""},
		{"dependency empty", ck("{name: a, dependency: {wait: \"\"}}"), "probes.checks[0].dependency.wait: empty"},
		{"dependency bad", ck("{name: a, dependency: {wait: \"service:\"}}"), "probes.checks[0].dependency.wait"},
		{"rpc relative config file", ck("{name: a, rpc: {topic: conductor, configFiles: [/etc/nova/nova.conf, nova.conf]}}"), "probes.checks[0].rpc.configFiles[1]: \"nova.conf\" is not an absolute path"},
		{"rpc relative config dir", ck("{name: a, rpc: {topic: conductor, configDirs: [nova.conf.d]}}"), "probes.checks[0].rpc.configDirs[0]: \"nova.conf.d\" is not an absolute path"},
		{"rpc no topic", ck("{name: a, rpc: {configFile: /etc/nova/nova.conf}}"), "probes.checks[0].rpc.topic: empty"},
		{"rpc bad url redacted", ck("{name: a, rpc: {transportURL: \"nova:s3cret@host\", topic: c}}"), "probes.checks[0].rpc.transportURL"},
		{"sidecar two matchers", "sidecar:\n  process: {name: a, pidFile: /run/a.pid}\n", "sidecar.process: give one of"},
		{"sidecar relative pid file", "sidecar:\n  process: {pidFile: a.pid}\n", "sidecar.process.pidFile"},
		{"sidecar bad regex", "sidecar:\n  process: {cmdline: \"(\"}\n", "sidecar.process.cmdline"},
		{"never with probes", "run:\n  supervise: never\n" + ck("{name: a, tcp: {address: \"a:1\"}}"), "run.supervise: \"never\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("agent.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for %q", tc.yaml)
			}
			if !strings.HasPrefix(err.Error(), "agent.yaml: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to start with the file name and contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows a password: %q", err)
			}
		})
	}
}
