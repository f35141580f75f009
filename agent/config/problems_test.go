package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// wantProblems checks that Parse refuses y with exactly the problems want,
// in any order, each line naming the file.
func wantProblems(t *testing.T, y string, want ...string) {
	t.Helper()
	_, err := Parse("agent.yaml", []byte(y))
	if err == nil {
		t.Fatalf("no error for\n%s", y)
	}
	got := Problems(err)
	if len(got) != len(strings.Split(err.Error(), "\n")) {
		t.Errorf("Problems gives %d lines, the error has %d", len(got), len(strings.Split(err.Error(), "\n")))
	}
	for _, w := range want {
		if !slices.Contains(got, "agent.yaml: "+w) {
			t.Errorf("missing problem %q", w)
		}
	}
	for _, g := range got {
		if !strings.HasPrefix(g, "agent.yaml: ") {
			t.Errorf("problem %q does not start with the file's name", g)
		}
		if !slices.Contains(want, strings.TrimPrefix(g, "agent.yaml: ")) {
			t.Errorf("unexpected problem %q", g)
		}
	}
	if t.Failed() {
		t.Logf("all problems:\n%s", err)
	}
}

// One run shows every independent problem, in every section and entry.
func TestParseEveryProblem(t *testing.T) {
	wantProblems(t, `
dependencies:
  timeout: soon
  wait:
    - service:mariadb
    - "tcp:"
    - {wait: "http://keystone:5000/", expectStatus: [200, 999], timeout: -1s}
render:
  - {dest: /etc/a.conf, perm: "0999"}
  - {src: /a.tmpl, dest: /etc/b.conf}
run:
  supervise: sometimes
  grace: forever
probes:
  address: "8095"
  checks:
    - {name: api, http: {url: "ftp://x"}, period: 1s, timeout: 2s}
    - {name: api, tcp: {address: db}, probes: [ready, liveness, alive]}
    - {name: Bad!, process: {}, period: often, timeout: 0s}
bootstrap:
  mode: create
  name: Keystone_DB
  retries: 11
  permanentExitCodes: [0, 2]
  phases: [{name: contract}, {name: migrate}]
exposure:
  keystone: {port: 70000, scheme: ftp}
reload:
  quiet: 2s
  maxWait: 1s
  actions:
    - {path: etc/a, action: none}
    - {path: /etc/b, action: reboot}
  signal: KILL
logs:
  files:
    - {path: keystone/*.log, tag: "a b"}
    - {path: /var/log/x.log, exclude: ["["]}
  sink: {type: kafka}
  maxLineSize: 10
`,
		`dependencies.timeout: "soon" is not a duration (want e.g. "90s" or "5m")`,
		`dependencies.wait[1].wait: dependency "tcp:": empty value after "tcp:"`,
		`dependencies.wait[2].expectStatus[1]: 999 is not an HTTP status code`,
		`dependencies.wait[2].timeout: negative duration "-1s"`,
		`render[0].src: empty`,
		`render[0].perm: "0999" is not an octal mode`,
		`run.grace: "forever" is not a duration (want e.g. "90s" or "5m")`,
		`run.supervise: "sometimes" (want auto, always or never)`,
		`probes.address: "8095" is not HOST:PORT (want e.g. ":8095")`,
		`probes.checks[0].timeout: 2s is longer than the period 1s`,
		`probes.checks[0].http.url: "ftp://x" is not an http:// or https:// URL`,
		`probes.checks[1].name: "api" already used by probes.checks[0]`,
		`probes.checks[1].probes[0]: "ready" (want startup, readiness or liveness)`,
		`probes.checks[1].probes[2]: "alive" (want startup, readiness or liveness)`,
		`probes.checks[1].tcp.address: "db" is not HOST:PORT`,
		`probes.checks[2].name: "Bad!" (want lower-case letters, digits, '-', '_' or '.')`,
		`probes.checks[2].period: "often" is not a duration (want e.g. "90s" or "5m")`,
		`probes.checks[2].timeout: must be above 0`,
		`bootstrap.name: "Keystone_DB" is not a DNS label (lower case letters, digits and '-', at most 63)`,
		`bootstrap.retries: 11 (want 0 to 10)`,
		`bootstrap.permanentExitCodes[0]: 0 (want 1 to 255: exit code 0 is success)`,
		`bootstrap.phases[1]: "migrate" runs before the rollout but comes after a phase that waits for it`,
		`bootstrap.job: empty (create mode needs the Job's template)`,
		`exposure["keystone"].port: 70000 is not a port`,
		`exposure["keystone"].scheme: "ftp" (want http or https)`,
		`reload.maxWait: 1s is shorter than quiet (2s)`,
		`reload.actions[0].path: "etc/a" is not an absolute path`,
		`reload.actions[1].action: "reboot" (want signal, restart, rollout or none)`,
		`reload.signal: "KILL" is not a signal a service reloads on (want one of SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT, SIGWINCH, SIGTERM)`,
		`logs.files[0].path: "keystone/*.log" is not an absolute path`,
		`logs.files[0].tag: "a b" (want letters, digits, '.', '-', '_')`,
		`logs.files[1].exclude[0]: "[" is not a glob`,
		`logs.sink.type: "kafka" (want forward, syslog or stdout)`,
		`logs.maxLineSize: 10 (want at least 1024 bytes)`,
	)
}

// Unknown fields at every depth are all reported, each with the object it
// is in and the name meant when one is close.
func TestParseUnknownFieldsEveryDepth(t *testing.T) {
	wantProblems(t, `
namespce: openstack
dependencies:
  waits: [service:a]
  wait:
    - {wait: "tcp:db:3306", timeot: 1s}
probes:
  checks:
    - {name: a, process: {}}
    - name: b
      htpp: {url: "http://a/"}
    - name: c
      http: {url: "http://a/", expect: [200]}
bootstrap:
  endpoints:
    credentials: /s
    type: image
    name: glance
    public: {service: glance-api, pth: /v2}
logs:
  files: [{path: /var/log/a.log, tags: a}]
  sink: {type: stdout, tls: {cafile: /ca.pem, verify: false}}
exposure:
  keystone: {host: 192.0.2.1, vip: 192.0.2.2}
`,
		`unknown field "namespce" (did you mean "namespace"?)`,
		`dependencies: unknown field "waits" (did you mean "wait"?)`,
		`dependencies.wait[0]: unknown field "timeot" (did you mean "timeout"?)`,
		`probes.checks[1]: unknown field "htpp" (did you mean "http"?)`,
		`probes.checks[2].http: unknown field "expect"`,
		`bootstrap.endpoints.public: unknown field "pth" (did you mean "path"?)`,
		`logs.files[0]: unknown field "tags" (did you mean "tag"?)`,
		`logs.sink.tls: unknown field "verify"`,
		`exposure["keystone"]: unknown field "vip"`,
		// the sink's tls is there (cafile is caFile: case does not count),
		// which stdout does not take
		`logs.sink: type stdout takes no address, sharedKey, sharedKeyFile or tls`,
	)
}

// Values of the wrong type, unknown fields and bad values: all in one run,
// without what follows from a field that could not be read (the check b
// has no type because its type is misspelt; exec.command is not "empty").
func TestParseTypeUnknownAndSemantic(t *testing.T) {
	wantProblems(t, `
namespace: [openstack]
dependencies:
  wait:
    - 5
    - {wait: "http://a/", expectStatus: "200"}
    - "foo:bar"
render:
  - {src: /a, dest: /b, perm: 999}
probes:
  checks:
    - {name: a, exec: {command: 3}}
    - {name: b, htpp: {url: "http://a/"}}
    - {name: c, connections: {ports: [3306, x], min: -1}}
    - {name: d, tcp: {address: "a:1"}, period: 1ms}
bootstrap:
  mode: create
  name: x
  job: /j.yaml
  retries: two
  phases: [{name: expand, afterRollout: maybe}]
reload:
  watch: /var/lib/kolla/config_files
  quiet: soon
`,
		`cannot unmarshal array into field namespace (want string)`,
		`dependencies: cannot unmarshal number 5 into field dependencies.wait[0] (want a string or an object)`,
		`dependencies.wait[1]: cannot unmarshal string into field dependencies.wait[1].expectStatus (want a list)`,
		`dependencies.wait[2].wait: dependency "foo:bar": unknown type "foo" (want dns, tcp, http(s), file, socket, service, job, daemonset, pod, container or resource)`,
		`render[0].perm: "999" is not an octal mode`,
		`probes.checks[0].exec: cannot unmarshal number 3 into field probes.checks[0].exec.command (want a string or a list of strings)`,
		`probes.checks[1]: unknown field "htpp" (did you mean "http"?)`,
		`probes.checks[2].connections: cannot unmarshal string into field probes.checks[2].connections.ports[1] (want int)`,
		`probes.checks[2].connections.min: negative`,
		`probes.checks[3].period: 1ms is below the minimum of 100ms`,
		`bootstrap: cannot unmarshal string into field bootstrap.retries (want int)`,
		`bootstrap.phases[0]: cannot unmarshal string into field bootstrap.phases[0].afterRollout (want bool)`,
		`reload: cannot unmarshal string into field reload.watch (want a list)`,
		`reload.quiet: "soon" is not a duration (want e.g. "90s" or "5m")`,
	)
}

// Some problems of structure, each alone.
func TestParseStructureProblems(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"a list", "- a\n", "cannot unmarshal array into the document (want an object)"},
		{"a key twice", "namespace: a\nnamespace: b\n", `yaml: unmarshal errors: line 2: key "namespace" already set in map`},
		{"reload as a list", "reload: [signal]\n", "cannot unmarshal array into field reload (want an object)"},
		{"a number too large", "bootstrap: {mode: create, name: x, job: /j, permanentExitCodes: [3000000000]}\n", "bootstrap: cannot unmarshal number 3000000000 into field bootstrap.permanentExitCodes[0] (want int32)"},
		{"a fraction for an int", "logs: {files: [{path: /a}], sink: {type: stdout}, maxLineSize: 1.5}\n", "logs: cannot unmarshal number 1.5 into field logs.maxLineSize (want int)"},
		{"exec command of numbers", "probes:\n  checks: [{name: a, exec: {command: [a, 1]}}]\n", "probes.checks[0].exec: cannot unmarshal array into field probes.checks[0].exec.command (want a string or a list of strings)"},
		{"a number in a long-form dependency", "dependencies:\n  wait: [{wait: 5}]\n", "dependencies.wait[0]: cannot unmarshal number 5 into field dependencies.wait[0].wait (want string)"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantProblems(t, tc.yaml, tc.want) })
	}
	// A YAML syntax error is one problem, with its line: nothing past it
	// can be read.
	_, err := Parse("agent.yaml", []byte("namespace: a\nprobes:\n  checks: [\n"))
	if p := Problems(err); len(p) != 1 || !strings.HasPrefix(p[0], "agent.yaml: yaml: line ") {
		t.Errorf("syntax error: %q", p)
	}
	// What sigs.k8s.io/yaml converts is no problem: a number or a bool
	// where a string is wanted, a field name in another case.
	c, err := Parse("agent.yaml", []byte("Namespace: 123\nbootstrap: {mode: create, name: x, job: /j, version: 2026.1}\nrun: {User: 42}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "123" || c.Bootstrap.Version != "2026.1" || c.Run.User != "42" {
		t.Errorf("converted: %q %q %q", c.Namespace, c.Bootstrap.Version, c.Run.User)
	}
}

// Past MaxProblems, the rest are counted.
func TestParseProblemsCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("render:\n")
	const n = MaxProblems + 17
	for range n {
		b.WriteString("  - {dest: /etc/a}\n")
	}
	_, err := Parse("agent.yaml", []byte(b.String()))
	p := Problems(err)
	if len(p) != MaxProblems+1 {
		t.Fatalf("%d lines, want %d and one that counts the rest", len(p), MaxProblems+1)
	}
	for i, l := range p[:MaxProblems] {
		if want := fmt.Sprintf("agent.yaml: render[%d].src: empty", i); l != want {
			t.Errorf("line %d: %q, want %q", i, l, want)
		}
	}
	if want := "agent.yaml: and 17 more"; p[MaxProblems] != want {
		t.Errorf("last line %q, want %q", p[MaxProblems], want)
	}
	if Problems(nil) != nil {
		t.Error("Problems(nil) is not nil")
	}
}

func TestProblemPath(t *testing.T) {
	for s, want := range map[string]string{
		"probes.checks[0].name: empty":                    "probes.checks[0].name",
		`exposure["a.b"].host: "x"`:                       `exposure["a.b"].host`,
		`exposure["a: b]"]: empty`:                        `exposure["a: b]"]`,
		"bootstrap.job, command and phases: not for wait": "",
		`unknown field "a"`:                               "",
		"logs.files: empty (the log files)":               "logs.files",
		"run.supervise: \"never\" execs the service":      "run.supervise",
	} {
		if got := problemPath(s); got != want {
			t.Errorf("problemPath(%q) = %q, want %q", s, got, want)
		}
	}
	for _, tc := range []struct {
		p, d string
		want bool
	}{
		{"probes.checks[0].tcp.address", "probes.checks[0].tcp.address", true},
		{"probes.checks[0].exec.command", "probes.checks[0].exec", true},
		{"probes.checks[0]", "probes.checks[0].htpp", true},
		{"probes.checks[0].name", "probes.checks[0].htpp", false},
		{"probes.checks[1]", "probes.checks[10].x", false},
		{`exposure["k"]`, `exposure["k"].port`, true},
		{`exposure["k"].host`, `exposure["k"].port`, false},
		{"", "namespce", false},
	} {
		if got := follows(tc.p, tc.d); got != tc.want {
			t.Errorf("follows(%q, %q) = %v, want %v", tc.p, tc.d, got, tc.want)
		}
	}
}
