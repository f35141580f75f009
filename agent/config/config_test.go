package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/discovery"
)

func TestParseValid(t *testing.T) {
	y := `
namespace: openstack
terminationMessagePath: /tmp/term
dependencies:
  timeout: 5m
  wait:
    - service:mariadb
    - job:keystone-db-sync
    - wait: http://keystone-api:5000/v3
      timeout: 90s
      expectStatus: [200, 300]
    - {wait: "dns:memcached"}
`
	c, err := Parse("agent.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "openstack" || c.TerminationMessagePath != "/tmp/term" {
		t.Errorf("top-level fields: %+v", c)
	}
	if got := c.Dependencies.Timeout.Duration(); got != 5*time.Minute {
		t.Errorf("Timeout() = %v", got)
	}
	deps, err := c.Deps()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"service:mariadb", "job:keystone-db-sync", "http://keystone-api:5000/v3", "dns:memcached"}
	if len(deps) != len(want) {
		t.Fatalf("got %d deps, want %d", len(deps), len(want))
	}
	for i, d := range deps {
		if d.String() != want[i] {
			t.Errorf("dep %d = %s, want %s", i, d, want[i])
		}
	}
	if deps[2].Timeout != 90*time.Second || len(deps[2].ExpectStatus) != 2 || deps[2].ExpectStatus[1] != 300 {
		t.Errorf("long form lost fields: %+v", deps[2])
	}
	if deps[0].Kind != discovery.KindService {
		t.Errorf("kind %s", deps[0].Kind)
	}
}

func TestParseRun(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`
render:
  - {src: /etc/kolla-agent/keystone.conf.tmpl, dest: /etc/keystone/keystone.conf, owner: keystone, perm: "0640"}
renderOptions: {allowFiles: [/etc/keystone/secrets], timeout: 90s}
run:
  command: keystone-api --config-file /etc/keystone/keystone.conf
  user: keystone
  grace: 10s
  bootstrap: keystone-manage db_sync
  supervise: always
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Run.Grace.Duration() != 10*time.Second || c.RenderOptions.Timeout.Duration() != 90*time.Second || c.Run.Bootstrap != "keystone-manage db_sync" || c.Render[0].Perm != "0640" {
		t.Errorf("parsed %+v", c)
	}
	d, _ := Default()
	if d.Run.Grace.Duration() != 30*time.Second || d.RenderOptions.Timeout.Duration() != DefaultTimeout {
		t.Errorf("defaults: grace %v, render timeout %v", d.Run.Grace.Duration(), d.RenderOptions.Timeout.Duration())
	}
}

func TestDefault(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if deps, _ := c.Deps(); len(deps) != 0 {
		t.Errorf("embedded default waits for %v", deps)
	}
	if c.Dependencies.Timeout.Duration() != DefaultTimeout {
		t.Errorf("default timeout %v", c.Dependencies.Timeout.Duration())
	}
}

// Every bad input is an error that names the file and the field.
func TestParseBad(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"yaml syntax", "dependencies:\n  wait: [\n", "agent.yaml: "},
		{"unknown top-level field", "dependencie:\n  wait: []\n", `unknown field "dependencie"`},
		{"unknown section field", "dependencies:\n  waits: []\n", `unknown field "waits"`},
		{"bad overall timeout", "dependencies:\n  timeout: soon\n", `dependencies.timeout: "soon" is not a duration`},
		{"negative timeout", "dependencies:\n  timeout: -1s\n", "dependencies.timeout: negative duration"},
		{"bad dependency", "dependencies:\n  wait: [\"service:\"]\n", "dependencies.wait[0].wait: dependency \"service:\""},
		{"unknown kind", "dependencies:\n  wait: [ok, \"foo:bar\"]\n", "dependencies.wait[0].wait"},
		{"bad entry timeout", "dependencies:\n  wait:\n    - service:a\n    - {wait: \"tcp:db:3306\", timeout: soon}\n", `dependencies.wait[1].timeout: "soon" is not a duration`},
		{"unknown entry field", "dependencies:\n  wait:\n    - {wait: \"tcp:db:3306\", timeot: 1s}\n", `dependencies.wait[0]: unknown field "timeot"`},
		{"entry field of the wrong type", "dependencies:\n  wait:\n    - {wait: \"http://a/\", expectStatus: \"200\"}\n", "dependencies.wait[0]: cannot unmarshal"},
		{"empty entry", "dependencies:\n  wait:\n    - {timeout: 1s}\n", "dependencies.wait[0].wait: empty"},
		{"expectStatus on tcp", "dependencies:\n  wait:\n    - {wait: \"tcp:db:3306\", expectStatus: [200]}\n", "dependencies.wait[0].expectStatus: only for http"},
		{"bad status code", "dependencies:\n  wait:\n    - {wait: \"http://a/\", expectStatus: [200, 999]}\n", "dependencies.wait[0].expectStatus[1]: 999"},
		{"wait not a list", "dependencies:\n  wait: service:a\n", "agent.yaml: "},
		{"namespace of wrong type", "namespace: [a]\n", "agent.yaml: "},
		{"render without src", "render:\n  - {dest: /etc/a}\n", "render[0].src: empty"},
		{"render without dest", "render:\n  - {src: /a}\n", "render[0].dest: empty"},
		{"render bad perm", "render:\n  - {src: /a, dest: /b, perm: \"0999\"}\n", `render[0].perm: "0999"`},
		{"render unknown field", "render:\n  - {src: /a, dest: /b, mode: \"0600\"}\n", `unknown field "mode"`},
		{"bad grace", "run:\n  grace: forever\n", `run.grace: "forever"`},
		{"bad supervise", "run:\n  supervise: sometimes\n", `run.supervise: "sometimes"`},
		{"bad render timeout", "renderOptions:\n  timeout: x\n", `renderOptions.timeout: "x"`},
		{"exposure of a bad service name", "exposure:\n  Keystone: {host: 192.0.2.1}\n", `exposure["Keystone"]: want a Service as NAME or NAME.NAMESPACE`},
		{"empty exposure", "exposure:\n  keystone: {}\n", `exposure["keystone"]: empty`},
		{"exposure host with a port", "exposure:\n  keystone: {host: \"192.0.2.1:5000\"}\n", `exposure["keystone"].host: "192.0.2.1:5000" is not an IP address or a DNS name`},
		{"exposure host as a URL", "exposure:\n  keystone: {host: \"https://vip\"}\n", `exposure["keystone"].host: "https://vip"`},
		{"exposure host with a zone", "exposure:\n  keystone: {host: \"fe80::1%eth0\"}\n", `exposure["keystone"].host: "fe80::1%eth0"`},
		{"exposure bad port", "exposure:\n  keystone.openstack: {port: 70000}\n", `exposure["keystone.openstack"].port: 70000 is not a port`},
		{"exposure bad scheme", "exposure:\n  keystone: {scheme: ftp}\n", `exposure["keystone"].scheme: "ftp" (want http or https)`},
		{"exposure unknown field", "exposure:\n  keystone: {vip: 192.0.2.1}\n", `unknown field "vip"`},
		{"exposure port of the wrong type", "exposure:\n  keystone: {port: https}\n", "agent.yaml: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("agent.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for %q", tc.yaml)
			}
			if !strings.HasPrefix(err.Error(), "agent.yaml: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to start with the file name and contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !os.IsNotExist(err) {
		t.Errorf("Load of a missing file: %v, want a not-exist error", err)
	}
}

// FuzzParse: no input panics, and a config that loads is valid throughout.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"dependencies:\n  wait:\n    - service:mariadb\n    - {wait: \"http://a:1/\", timeout: 1s, expectStatus: [200]}\n",
		"namespace: x\ndependencies: {timeout: 5m}\n",
		"dependencies:\n  wait: [\"job:ns/a=b,c=d\", \"pod:app=x@samenode\"]\n",
		"{}", "", "- a", "dependencies: {wait: [{}]}",
		"logs:\n  files: [{path: /var/log/kolla/keystone/*.log, exclude: [\"*.gz\"], tag: kolla.keystone}]\n  sink: {type: forward, address: \"127.0.0.1:24224\", sharedKey: k, tls: {caFile: /ca.pem}}\n  stateDir: /var/log/kolla/.kolla-agent\n  multiline: {firstLine: \"^\\\\[\", idle: 1s}\n",
		"exposure:\n  keystone.openstack: {host: 192.0.2.1, port: 443, scheme: https}\n",
		"probes:\n  address: \":8095\"\n  checks:\n    - {name: api, http: {url: \"http://a:1/v3\"}, probes: [startup], period: 1s}\n    - {name: x, exec: {command: [a, b]}}\n",
		"probes:\n  checks:\n    - {name: r, rpc: {transportURL: \"rabbit://u:p@h:1/\", topic: t}}\nsidecar: {process: {cmdline: \"nova-.*\"}}\n",
		"reload: {}\n", "reload:\n", "reload: {signal: usr1, action: none}\n",
		"reload:\n  watch: [/var/lib/kolla/config_files]\n  quiet: 1s\n  maxWait: 10s\n  rescan: 60s\n  action: signal\n  signal: SIGHUP\n  verifyTimeout: 60s\n  validate:\n    - dest: /etc/keystone/keystone.conf\n      command: oslo-config-validator --namespace keystone --input-file {{ .Staged }}\n",
		"reload:\n  actions:\n    - {path: \"/etc/apache2/*\", action: none}\n    - {path: \"/etc/keystone/*.[jy]*\", action: restart}\n  stateDir: /run/r\n",
		"reload:\n  validate:\n    - {dest: /a, command: \"c '{{ .Staged }}' {{ .Dest }}\"}\n    - {dest: /a, command: \"c {{ .Staged }}\"}\n",
		"reload: {quiet: 2s, maxWait: 1s, verifyTimeout: 0s, rescan: -1s}\n",
		"reload: {actions: [{path: \"/a[\", action: none}], signal: SIGKILL}\n",
		// several problems at once, of structure and of values
		"dependencie: {}\nprobes:\n  checks:\n    - {name: A, htpp: {}, period: soon}\n    - {name: b, tcp: {address: 1}, timeout: [1]}\nexposure: {x: {port: https, vip: 1}}\n",
		"dependencies:\n  wait: [5, {wait: \"tcp:a:1\", timeot: 1s, expectStatus: \"x\"}, null]\nreload: [x]\nlogs: {files: [{path: 3}], sink: {type: kafka}}\n",
		"a: 1\na: 2\n", "bootstrap: {Mode: create, name: X, retries: two, phases: [{name: a, afterRollout: maybe}]}\n",
	} {
		f.Add([]byte(s))
	}
	examples, _ := filepath.Glob("../../examples/*/agent.yaml")
	for _, p := range examples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkStructureWalk(t, b)
		c, err := Parse("f.yaml", b)
		if err != nil {
			for _, p := range Problems(err) {
				if !strings.HasPrefix(p, "f.yaml: ") {
					t.Fatalf("a problem without the file's name: %q", p)
				}
			}
			if n := len(Problems(err)); n > MaxProblems+1 {
				t.Fatalf("%d problems listed, more than %d", n, MaxProblems)
			}
			return
		}
		if _, err := c.Deps(); err != nil {
			t.Fatalf("Parse accepted a config whose Deps fail: %v", err)
		}
		if c.Dependencies.Timeout.Duration() <= 0 {
			t.Fatalf("non-positive timeout %v", c.Dependencies.Timeout.Duration())
		}
		// What loads, written back, loads again, the same.
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		c2, err := Parse("again.yaml", out)
		if err != nil {
			t.Fatalf("a config that loaded does not load once written back:\n%s\n%v", out, err)
		}
		if out2, _ := yaml.Marshal(c2); !bytes.Equal(out, out2) {
			t.Fatalf("written back twice, it differs:\n%s\n---\n%s", out, out2)
		}
	})
}

// checkStructureWalk: the walk that finds every unknown field and value of
// the wrong type agrees with strict decoding, which stops at the first:
// nothing where it finds nothing, something where it fails.
func checkStructureWalk(t *testing.T, b []byte) {
	t.Helper()
	if _, err := yaml.YAMLToJSONStrict(b); err != nil {
		return // a syntax error or a key given twice: not the walk's business
	}
	found, err := structureProblems(b)
	if err != nil {
		return
	}
	var c Config
	strictErr := yaml.UnmarshalStrict(b, &c)
	strictOK := strictErr == nil && !c.Dependencies.decodeErrs()
	switch {
	case strictOK && len(found) > 0:
		t.Fatalf("strict decoding takes %q, the walk finds %q", b, found)
	case !strictOK && len(found) == 0:
		t.Fatalf("strict decoding refuses %q (%v), the walk finds nothing", b, strictErr)
	}
}

// structureProblems reports what the walk finds wrong in a YAML document,
// without validating values (tests compare it with strict decoding).
func structureProblems(b []byte) ([]string, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	doc, err := genericJSON(j)
	if err != nil {
		return nil, err
	}
	var e problems
	(&walker{e: &e}).value(doc, reflect.TypeFor[Config](), "", "", true)
	return e.list, nil
}
