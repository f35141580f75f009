package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
)

func TestParseBootstrap(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`
bootstrap:
  mode: create
  name: keystone-db-sync
  job: /etc/kolla-agent/db-sync-job.yaml
  command: keystone-manage db_sync
  version: "2026.1"
  timeout: 20m
  retries: 2
  permanentExitCodes: [2, 3]
  inputs: [/etc/keystone/keystone.conf, /etc/keystone/policy.yaml]
  phases:
    - {name: expand, command: keystone-manage db_sync --expand}
    - {name: migrate, command: keystone-manage db_sync --migrate}
    - {name: contract, command: keystone-manage db_sync --contract}
  owner: deployment/keystone-api
  podCondition: true
`))
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bootstrap
	if !b.Enabled() || b.Mode != BootstrapCreate || b.Name != "keystone-db-sync" || b.Job != "/etc/kolla-agent/db-sync-job.yaml" ||
		b.Command != "keystone-manage db_sync" || b.Version != "2026.1" || b.Retries != 2 || !b.PodCondition {
		t.Errorf("parsed %+v", b)
	}
	if got := b.Timeout.Duration(); got != 20*time.Minute {
		t.Errorf("timeout %v, want 20m", got)
	}
	if !reflect.DeepEqual(b.PermanentExitCodes, []int32{2, 3}) {
		t.Errorf("permanentExitCodes %v", b.PermanentExitCodes)
	}
	if !reflect.DeepEqual(b.Inputs, []string{"/etc/keystone/keystone.conf", "/etc/keystone/policy.yaml"}) {
		t.Errorf("inputs %v", b.Inputs)
	}
	if len(b.Phases) != 3 {
		t.Fatalf("phases %+v", b.Phases)
	}
	for i, want := range []struct {
		name, command string
		later         bool
	}{
		{"expand", "keystone-manage db_sync --expand", false},
		{"migrate", "keystone-manage db_sync --migrate", false},
		{"contract", "keystone-manage db_sync --contract", true},
	} {
		p := b.Phases[i]
		if p.Name != want.name || p.Command != want.command || p.Later() != want.later || p.AfterRollout != nil {
			t.Errorf("phases[%d] = %+v (later %v), want %+v", i, p, p.Later(), want)
		}
	}
	if kind, name := b.OwnerRef(); kind != "deployment" || name != "keystone-api" {
		t.Errorf("owner %q/%q", kind, name)
	}

	// Defaults.
	c, err = Parse("agent.yaml", []byte("bootstrap:\n  mode: create\n  name: x\n  job: /j.yaml\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Bootstrap.Timeout.Duration(); got != 10*time.Minute {
		t.Errorf("default timeout %v, want 10m", got)
	}
	if got := c.Bootstrap.LeaseDuration.Duration(); got != 15*time.Second {
		t.Errorf("default lease %v, want 15s", got)
	}
	if kind, name := c.Bootstrap.OwnerRef(); kind != "" || name != "" {
		t.Errorf("no owner: %q/%q", kind, name)
	}

	// No section: no bootstrap.
	c, err = Parse("agent.yaml", []byte("run:\n  command: keystone\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Bootstrap.Enabled() {
		t.Errorf("bootstrap enabled without a section: %+v", c.Bootstrap)
	}

	// Phase defaults and an explicit afterRollout.
	if (Phase{Name: "contract"}).Later() != true || (Phase{Name: "expand"}).Later() != false {
		t.Error("Later: want true for contract, false for expand")
	}
	c, err = Parse("agent.yaml", []byte(`
bootstrap:
  mode: create
  name: x
  job: /j.yaml
  phases:
    - {name: expand, afterRollout: false}
    - {name: contract, afterRollout: false}
    - {name: cleanup, afterRollout: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if ph := c.Bootstrap.Phases; ph[0].Later() || ph[1].Later() || !ph[2].Later() || ph[1].AfterRollout == nil || *ph[1].AfterRollout {
		t.Errorf("afterRollout not honoured: %v %v %v", ph[0].Later(), ph[1].Later(), ph[2].Later())
	}

	// Lease mode.
	c, err = Parse("agent.yaml", []byte(`
bootstrap:
  mode: lease
  name: keystone-bootstrap
  command: "keystone-manage bootstrap --bootstrap-region-id 'Region One'"
  leaseDuration: 30s
  owner: statefulset/keystone
`))
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Bootstrap; b.Mode != BootstrapLease || b.Name != "keystone-bootstrap" || b.Command != "keystone-manage bootstrap --bootstrap-region-id 'Region One'" {
		t.Errorf("lease: %+v", b)
	}
	if got := c.Bootstrap.LeaseDuration.Duration(); got != 30*time.Second {
		t.Errorf("lease %v, want 30s", got)
	}
	if kind, name := c.Bootstrap.OwnerRef(); kind != "statefulset" || name != "keystone" {
		t.Errorf("owner %q/%q", kind, name)
	}
	// Lease mode with phases, each with its own command.
	if _, err := Parse("agent.yaml", []byte(`
bootstrap:
  mode: lease
  name: keystone-bootstrap
  phases:
    - {name: expand, command: keystone-manage db_sync --expand}
    - {name: contract, command: keystone-manage db_sync --contract}
`)); err != nil {
		t.Errorf("lease with phases: %v", err)
	}

	// Wait mode.
	c, err = Parse("agent.yaml", []byte(`
bootstrap:
  mode: wait
  name: keystone
  timeout: 5m
  jobs: ["keystone-db-init", "application=keystone,component=db-sync"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Bootstrap.Mode != BootstrapWait || c.Bootstrap.Timeout.Duration() != 5*time.Minute {
		t.Errorf("wait: %+v", c.Bootstrap)
	}
	deps, err := c.Bootstrap.WaitJobs()
	if err != nil {
		t.Fatal(err)
	}
	if len(deps) != 2 {
		t.Fatalf("WaitJobs: %d dependencies, want 2: %+v", len(deps), deps)
	}
	if deps[0].Kind != discovery.KindJob || deps[0].Name != "keystone-db-init" || deps[0].Labels != nil {
		t.Errorf("jobs[0] = %+v, want job keystone-db-init", deps[0])
	}
	if want := map[string]string{"application": "keystone", "component": "db-sync"}; deps[1].Kind != discovery.KindJob || deps[1].Name != "" || !reflect.DeepEqual(deps[1].Labels, want) {
		t.Errorf("jobs[1] = %+v, want job selected by %v", deps[1], want)
	}
}

// Each bad bootstrap input is refused with the file and the field.
func TestParseBootstrapBad(t *testing.T) {
	create := func(s string) string { return "bootstrap:\n  mode: create\n  name: x\n  job: /j.yaml\n" + s }
	lease := func(s string) string { return "bootstrap:\n  mode: lease\n  name: x\n" + s }
	wait := func(s string) string { return "bootstrap:\n  mode: wait\n  name: x\n" + s }
	long := strings.Repeat("a", 64)
	ep := func(s string) string { return "bootstrap:\n  endpoints:\n" + indent(s) }
	for _, tc := range []struct{ name, yaml, want string }{
		// Decoding.
		{"unknown field", create("  jbo: /j.yaml\n"), `unknown field "jbo"`},
		{"unknown phase field", create("  phases: [{name: expand, after: true}]\n"), `unknown field "after"`},
		{"retries not a number", create("  retries: two\n"), "field bootstrap.retries (want int)"},
		// validateEndpoints.
		{"endpoints relative credentials", ep("  credentials: secret\n  type: image\n  name: glance\n  public: {service: glance-api}\n"), `bootstrap.endpoints.credentials: "secret" is not an absolute path`},
		{"endpoints without type", ep("  credentials: /s\n  name: glance\n  public: {service: glance-api}\n"), "bootstrap.endpoints.type: empty"},
		{"endpoints without name", ep("  credentials: /s\n  type: image\n  public: {service: glance-api}\n"), "bootstrap.endpoints.name: empty"},
		{"endpoints without any", ep("  credentials: /s\n  type: image\n  name: glance\n"), "bootstrap.endpoints: no public, internal or admin endpoint"},
		{"endpoint with service and url", ep("  credentials: /s\n  type: image\n  name: glance\n  public: {service: g, url: http://x}\n"), "bootstrap.endpoints.public: give one of service and url"},
		{"endpoint with neither", ep("  credentials: /s\n  type: image\n  name: glance\n  internal: {path: /v2}\n"), "bootstrap.endpoints.internal: give one of service and url"},
		{"endpoint bad service", ep("  credentials: /s\n  type: image\n  name: glance\n  public: {service: Glance_API}\n"), `bootstrap.endpoints.public.service: "Glance_API"`},
		{"endpoint url with path", ep("  credentials: /s\n  type: image\n  name: glance\n  admin: {url: \"http://x\", path: /v2}\n"), "bootstrap.endpoints.admin.path: only with service"},
		{"endpoint not http", ep("  credentials: /s\n  type: image\n  name: glance\n  admin: {url: \"ftp://x\"}\n"), `bootstrap.endpoints.admin.url: "ftp://x" is not an http(s) URL`},
		{"endpoint relative path", ep("  credentials: /s\n  type: image\n  name: glance\n  public: {service: glance-api, path: v2}\n"), `bootstrap.endpoints.public.path: "v2" does not start with /`},
		// validateBootstrap.
		{"no mode", "bootstrap:\n  name: x\n", "bootstrap.mode: empty"},
		{"no mode with phases", "bootstrap:\n  phases: [{name: expand}]\n", "bootstrap.mode: empty"},
		{"no mode with only other fields", "bootstrap:\n  timeout: 5m\n  owner: nonsense\n", "bootstrap.mode: empty"},
		{"unknown mode", "bootstrap:\n  mode: run\n  name: x\n", `bootstrap.mode: "run" (want create, wait or lease)`},
		{"no name", "bootstrap:\n  mode: create\n  job: /j.yaml\n", "bootstrap.name: empty"},
		{"name not a DNS label", "bootstrap:\n  mode: create\n  name: Keystone_DB\n  job: /j.yaml\n", `bootstrap.name: "Keystone_DB" is not a DNS label`},
		{"name ends with a dash", "bootstrap:\n  mode: create\n  name: keystone-\n  job: /j.yaml\n", `bootstrap.name: "keystone-" is not a DNS label`},
		{"name too long", "bootstrap:\n  mode: create\n  name: " + long + "\n  job: /j.yaml\n", `bootstrap.name: "` + long + `" is not a DNS label`},
		{"version not a label value", create("  version: \"2026.1 final\"\n"), `bootstrap.version: "2026.1 final" is not a label value`},
		{"version with a slash", create("  version: a/b\n"), `bootstrap.version: "a/b"`},
		{"version too long", create("  version: " + long + "\n"), `bootstrap.version: "` + long + `"`},
		{"negative retries", create("  retries: -1\n"), "bootstrap.retries: -1 (want 0 to 10)"},
		{"too many retries", create("  retries: 11\n"), "bootstrap.retries: 11 (want 0 to 10)"},
		{"bad timeout", create("  timeout: soon\n"), `bootstrap.timeout: "soon" is not a duration`},
		{"negative timeout", create("  timeout: -1m\n"), `bootstrap.timeout: negative duration "-1m"`},
		{"bad leaseDuration", lease("  command: x\n  leaseDuration: long\n"), `bootstrap.leaseDuration: "long" is not a duration`},
		{"short leaseDuration", lease("  command: x\n  leaseDuration: 1s\n"), "bootstrap.leaseDuration: 1s is too short to renew"},
		{"relative input", create("  inputs: [/etc/keystone/keystone.conf, keystone.conf]\n"), `bootstrap.inputs[1]: "keystone.conf" is not an absolute path`},
		{"relative first input", create("  inputs: [keystone.conf]\n"), `bootstrap.inputs[0]: "keystone.conf"`},
		{"exit code 0", create("  permanentExitCodes: [0]\n"), "bootstrap.permanentExitCodes[0]: 0 (want 1 to 255"},
		{"allow a relative host path", create("  allow: {hostPaths: [var/lib/nova]}\n"), `bootstrap.allow.hostPaths[0]: "var/lib/nova" is not an absolute path`},
		{"allow an unknown namespace", create("  allow: {hostNamespaces: [network, user]}\n"), `bootstrap.allow.hostNamespaces[1]: "user" (want network, pid or ipc)`},
		{"allow CAP_", create("  allow: {capabilities: [CAP_NET_ADMIN]}\n"), `bootstrap.allow.capabilities[0]: "CAP_NET_ADMIN"`},
		{"allow in lease mode", lease("  command: x\n  allow: {privileged: [c]}\n"), "bootstrap.allow: only for create mode"},
		{"exit code 256", create("  permanentExitCodes: [1, 256]\n"), "bootstrap.permanentExitCodes[1]: 256"},
		{"create without job", "bootstrap:\n  mode: create\n  name: x\n", "bootstrap.job: empty (create mode needs the Job's template)"},
		{"create relative job", "bootstrap:\n  mode: create\n  name: x\n  job: job.yaml\n", `bootstrap.job: "job.yaml" is not an absolute path`},
		{"create with jobs", create("  jobs: [other]\n"), "bootstrap.jobs: only for wait mode"},
		{"lease with job", lease("  command: x\n  job: /j.yaml\n"), "bootstrap.job: lease mode runs bootstrap.command in the pod"},
		{"lease with jobs", lease("  command: x\n  jobs: [other]\n"), "bootstrap.jobs: only for wait mode"},
		{"lease without command", lease(""), "bootstrap.command: empty (lease mode runs it)"},
		{"lease bad quoting", lease("  command: \"sh -c 'x\"\n"), `bootstrap.command: "sh -c 'x"`},
		{"lease with retries", lease("  command: x\n  retries: 1\n"), "bootstrap.retries and permanentExitCodes: only for create mode"},
		{"lease with exit codes", lease("  command: x\n  permanentExitCodes: [2]\n"), "bootstrap.retries and permanentExitCodes: only for create mode"},
		{"wait without jobs", wait(""), "bootstrap.jobs: empty (wait mode waits"},
		{"wait with job", wait("  jobs: [a]\n  job: /j.yaml\n"), "bootstrap.job, command and phases: not for wait mode"},
		{"wait with command", wait("  jobs: [a]\n  command: x\n"), "bootstrap.job, command and phases: not for wait mode"},
		{"wait with phases", wait("  jobs: [a]\n  phases: [{name: expand}]\n"), "bootstrap.job, command and phases: not for wait mode"},
		{"wait bad job name", wait("  jobs: [a, Keystone_DB]\n"), `bootstrap.jobs[1]: "Keystone_DB"`},
		{"wait bad selector", wait("  jobs: [\"=x\"]\n"), `bootstrap.jobs[0]: "=x"`},
		// validatePhases.
		{"phase without name", create("  phases: [{command: x}]\n"), "bootstrap.phases[0].name: empty"},
		{"phase name not a DNS label", create("  phases: [{name: expand}, {name: Migrate}]\n"), `bootstrap.phases[1].name: "Migrate" is not a short DNS label`},
		{"phase name too long", create("  phases: [{name: " + strings.Repeat("p", 21) + "}]\n"), `bootstrap.phases[0].name: "` + strings.Repeat("p", 21) + `" is not a short DNS label (at most 20)`},
		{"phase twice", create("  phases: [{name: expand}, {name: expand}]\n"), `bootstrap.phases[1].name: "expand" appears twice`},
		{"lease phase without command", lease("  phases: [{name: expand, command: x}, {name: contract}]\n"), "bootstrap.phases[1].command: empty (lease mode runs it)"},
		{"phase before rollout after a later one", create("  phases: [{name: contract}, {name: migrate}]\n"), `bootstrap.phases[1]: "migrate" runs before the rollout but comes after a phase that waits for it`},
		{"explicit later then earlier", create("  phases: [{name: expand, afterRollout: true}, {name: migrate}]\n"), `bootstrap.phases[1]: "migrate" runs before the rollout`},
		{"phase bad quoting", create("  phases: [{name: expand, command: \"sh -c 'x\"}]\n"), `bootstrap.phases[0].command: "sh -c 'x"`},
		// validateOwner.
		{"owner without kind", create("  owner: keystone-api\n"), `bootstrap.owner: "keystone-api" (want deployment/NAME or statefulset/NAME)`},
		{"owner daemonset", create("  owner: daemonset/keystone\n"), `bootstrap.owner: "daemonset/keystone"`},
		{"owner without name", create("  owner: deployment/\n"), `bootstrap.owner: "deployment/"`},
		{"owner bad name", create("  owner: deployment/Keystone_API\n"), `bootstrap.owner: "deployment/Keystone_API"`},
		{"owner name too long", create("  owner: deployment/" + strings.Repeat("a", 254) + "\n"), `bootstrap.owner: "deployment/aaaa`},
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

// indent puts a bootstrap.endpoints body two more spaces in.
func indent(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// bootstrap.endpoints alone, without a mode: the catalog is kept, and `run`
// follows the public address.
func TestParseEndpointsOnly(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`
bootstrap:
  endpoints:
    credentials: /etc/keystone-admin
    type: image
    name: glance
    region: RegionOne
    public: {service: glance-api}
    internal: {service: glance-api.openstack, path: /}
    admin: {url: "http://glance.admin:9292"}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bootstrap
	if b.Enabled() || b.Endpoints == nil || b.Endpoints.Internal.Service != "glance-api.openstack" || !b.FollowsExposure() || !c.SteadyState() {
		t.Errorf("%+v", b)
	}
}
