// Package config is the schema of agent.yaml and its loading. Every error
// names the file and the field (dependencies.wait[2].timeout), and a config
// that loads is valid: later stages never meet a bad value.
package config

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/shlex"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes/ask"
)

// DefaultGrace is run.grace by default: the kubelet's default grace period.
const DefaultGrace = 30 * time.Second

// DefaultPath is where the agent looks for its config in a container.
const DefaultPath = ask.DefaultConfig

// DefaultTimeout bounds a dependency wait when the config does not.
const DefaultTimeout = 10 * time.Minute

// Config is agent.yaml. Later duties add their own sections.
type Config struct {
	// Namespace overrides the agent's own namespace (else NAMESPACE,
	// POD_NAMESPACE, or the service account's).
	Namespace string `json:"namespace,omitempty"`
	// Dependencies to wait for before anything else, and for how long.
	Dependencies Dependencies `json:"dependencies,omitempty"`
	// TerminationMessagePath receives the reason the agent stopped the pod.
	TerminationMessagePath string `json:"terminationMessagePath,omitempty"`
	// Render lists templates to render before the service starts.
	Render []RenderItem `json:"render,omitempty"`
	// RenderOptions bound what templates may read and how long they wait.
	RenderOptions RenderOptions `json:"renderOptions,omitempty"`
	// Run says how `kolla-agent run` starts the service.
	Run Run `json:"run,omitempty"`
	// Probes are the checks behind /livez, /readyz and /startupz.
	Probes Probes `json:"probes,omitempty"`
	// Sidecar says how `kolla-agent sidecar` finds the service's process.
	Sidecar Sidecar `json:"sidecar,omitempty"`
	// Bootstrap is one-time work per version, coordinated across replicas.
	Bootstrap Bootstrap `json:"bootstrap,omitempty"`
	// Exposure says, per Service (NAME or NAME.NAMESPACE), where users
	// outside the cluster reach it when the cluster cannot tell: an
	// operator's floating IP, the VIP in front of a NodePort Service's
	// nodes. It wins over the Service's kolla.openstack.org/public-*
	// annotations, field by field.
	Exposure map[string]PublicAddress `json:"exposure,omitempty"`
	// Reload takes the service to a changed config while it runs; nil:
	// off (`reload: {}` turns it on with the defaults).
	Reload *Reload `json:"reload,omitempty"`
	// Logs ships the service's log files to the logging sidecar; nil: off.
	Logs *Logs `json:"logs,omitempty"`
}

// PublicAddress is one entry of exposure:. Fields left out keep what the
// Service's annotations or the cluster say (a NodePort Service behind a
// host keeps its nodePort).
type PublicAddress struct {
	// Host is the public IP address or DNS name.
	Host string `json:"host,omitempty"`
	// Port is the public port.
	Port int `json:"port,omitempty"`
	// Scheme is http or https.
	Scheme string `json:"scheme,omitempty"`
}

// RenderItem is one template: src is a Go text/template, dest the file it
// renders to.
type RenderItem struct {
	// Src is the template, a Go text/template.
	Src string `json:"src"`
	// Dest is the file it renders to, replaced atomically.
	Dest string `json:"dest"`
	// Owner of the file, user[:group] (names or ids).
	Owner string `json:"owner,omitempty"`
	// Perm is the file's mode, in octal; default 0644, or 0600 when the
	// template calls secret.
	Perm string `json:"perm,omitempty"`
}

// RenderOptions is the renderOptions: section.
type RenderOptions struct {
	// AllowFiles lists the directories `file` and `secret` may read from.
	AllowFiles []string `json:"allowFiles,omitempty"`
	// Timeout bounds how long a template waits for a discovered value.
	Timeout Duration `json:"timeout,omitempty"`
}

// Run is the run: section.
type Run struct {
	// Command is the service, split like a shell would; `run -- CMD` and
	// kolla's config.json command take its place when given.
	Command string `json:"command,omitempty"`
	// User and Group to run the service as (names or ids).
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	// Grace is how long the service has between SIGTERM and SIGKILL.
	Grace Duration `json:"grace,omitempty"`
	// Bootstrap and Upgrade run instead of the service when KOLLA_BOOTSTRAP
	// or KOLLA_UPGRADE is in the environment (kolla's extend_start.sh).
	Bootstrap string `json:"bootstrap,omitempty"`
	Upgrade   string `json:"upgrade,omitempty"`
	// Supervise: "auto" (default) keeps the agent as the service's parent
	// when it is PID 1 (someone must reap zombies) or a steady-state duty is
	// configured (probes), and execs the service otherwise; "always" or
	// "never" force it.
	Supervise string `json:"supervise,omitempty"`
}

// Dependencies is the dependencies: section.
type Dependencies struct {
	// Timeout bounds the whole wait, in Go syntax ("90s", "5m"); default 10m.
	Timeout Duration `json:"timeout,omitempty"`
	// Wait lists the dependencies, each a string in the wait syntax or an
	// object {wait, timeout, expectStatus}.
	Wait []Dependency `json:"wait,omitempty"`
}

// Dependency is one entry of dependencies.wait.
type Dependency struct {
	// Wait is the dependency in the wait syntax (service:mariadb, ...).
	Wait string `json:"wait"`
	// Timeout bounds this dependency alone, in Go syntax.
	Timeout Duration `json:"timeout,omitempty"`
	// ExpectStatus: HTTP codes that count as up (default: any 2xx or 3xx).
	ExpectStatus []int `json:"expectStatus,omitempty"`

	// decodeErr is kept for validation, which knows the entry's index:
	// encoding/json drops the field path of errors from UnmarshalJSON.
	decodeErr error
}

// UnmarshalJSON accepts the short form (a string) and the long one.
func (d *Dependency) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &d.Wait)
	}
	type plain Dependency
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		d.decodeErr = err
		return nil
	}
	// Nothing is converted under a type that decodes itself: a timeout
	// must be a string here, as encoding/json would want one.
	var raw struct {
		Timeout json.RawMessage `json:"timeout"`
	}
	if json.Unmarshal(b, &raw) == nil && len(raw.Timeout) > 0 && raw.Timeout[0] != '"' && string(raw.Timeout) != "null" {
		d.decodeErr = fmt.Errorf("timeout: want a string, not %s", raw.Timeout)
		return nil
	}
	*d = Dependency(p)
	return nil
}

//go:embed default.yaml
var defaultYAML []byte

// Default is the embedded config used when there is no file: nothing to wait
// for, so the agent runs anywhere without a cluster.
func Default() (*Config, error) { return Parse("(embedded default)", defaultYAML) }

// Load reads and validates the config at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse decodes and validates a config; name is used in errors. The error
// lists every problem found, one a line, each "NAME: field.path: message"
// (Problems splits it; at most MaxProblems are listed). Only a YAML syntax
// error is reported alone: nothing past it can be read.
func Parse(name string, b []byte) (*Config, error) {
	c, err := Inspect(name, b)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Inspect is Parse for `config check`: with the problems it also returns
// the config as far as it could be read (nil only when the YAML does not
// parse), so the check can go on to the templates it names. A config that
// comes with an error must not be run.
func Inspect(name string, b []byte) (*Config, error) {
	var e problems
	c, dropped, err := decode(b, &e)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(dropped) > 0 {
		// A field that could not be read is not there for the validators:
		// what they say of it, or of the object it is in, is no news.
		e.skip = func(s string) bool {
			p := problemPath(s)
			return slices.ContainsFunc(dropped, func(d string) bool { return follows(p, d) })
		}
	}
	c.validate(&e)
	c.withDefaults()
	return c, e.err(name)
}

// Empty is a config that asks for nothing, with every default: the plan
// of kubernetes-entrypoint's variables and of `wait` has no agent.yaml.
func Empty() *Config {
	c := &Config{}
	c.withDefaults()
	return c
}

// withDefaults gives every section's unset fields their defaults, once
// the config is validated: each value is then what the agent runs with,
// read from its field. A duration's text stays as written, so a config
// written back reads the same.
func (c *Config) withDefaults() {
	c.Dependencies.Timeout.defaultZeroTo(DefaultTimeout)
	c.Run.Grace.defaultZeroTo(DefaultGrace)
	c.RenderOptions.Timeout.defaultZeroTo(c.Dependencies.Timeout.Duration())
	for i := range c.Probes.Checks {
		c.Probes.Checks[i].withDefaults()
	}
	c.Bootstrap.withDefaults()
	if c.Logs != nil {
		c.Logs.withDefaults()
	}
	if c.Reload != nil {
		c.Reload.withDefaults()
	}
}

// validate runs every section's checks; each records all the independent
// problems it finds.
func (c *Config) validate(e *problems) {
	_, err := c.Dependencies.Timeout.check("dependencies.timeout")
	e.addErr(err)
	c.deps(e)
	c.validateRun(e)
	c.validateProbes(e)
	c.validateBootstrap(e)
	c.validateExposure(e)
	c.validateReload(e)
	c.validateLogs(e)
}

// Deps returns the dependencies in the form discovery takes; the error names
// the entry (one line per problem).
func (c *Config) Deps() ([]discovery.Dependency, error) {
	var e problems
	deps := c.deps(&e)
	if err := e.err(""); err != nil {
		return nil, err
	}
	return deps, nil
}

// deps converts dependencies.wait, recording the problems of every entry.
func (c *Config) deps(e *problems) []discovery.Dependency {
	deps := make([]discovery.Dependency, 0, len(c.Dependencies.Wait))
	for i, w := range c.Dependencies.Wait {
		field := fmt.Sprintf("dependencies.wait[%d]", i)
		if w.decodeErr != nil {
			e.add("%s: %s", field, cleanYAMLError(w.decodeErr))
			continue
		}
		before := e.count()
		var d discovery.Dependency
		var err error
		if w.Wait == "" {
			e.add("%s.wait: empty", field)
		} else if d, err = discovery.Parse(w.Wait); err != nil {
			e.add("%s.wait: %v", field, err)
		} else if len(w.ExpectStatus) > 0 && d.Kind != discovery.KindHTTP {
			e.add("%s.expectStatus: only for http(s) dependencies, not %s", field, d.Kind)
		}
		for j, code := range w.ExpectStatus {
			if code < 100 || code > 599 {
				e.add("%s.expectStatus[%d]: %d is not an HTTP status code", field, j, code)
			}
		}
		timeout, err := w.Timeout.check(field + ".timeout")
		e.addErr(err)
		if e.count() == before {
			d.Timeout, d.ExpectStatus = timeout, w.ExpectStatus
			deps = append(deps, d)
		}
	}
	return deps
}

// parseDuration reads an optional duration in Go syntax; "" is 0.
func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (want e.g. \"90s\" or \"5m\")", field, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: negative duration %q", field, s)
	}
	return d, nil
}

// cleanYAMLError drops the layers sigs.k8s.io/yaml wraps around a decoding
// error ("error unmarshaling JSON: while decoding JSON: json: ..."), which say
// nothing to an operator, and names the field the way the file spells it.
func cleanYAMLError(err error) string {
	s := err.Error()
	for _, p := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	if i := strings.Index(s, "Go struct field "); i >= 0 {
		// "cannot unmarshal number into Go struct field Dependency.dependencies.wait.timeout of type string"
		rest := s[i+len("Go struct field "):]
		field, tail, _ := strings.Cut(rest, " of type ")
		if j := strings.Index(field, "."); j >= 0 {
			field = field[j+1:]
		}
		s = s[:i] + "field " + field + " (want " + tail + ")"
	}
	return oneLine(s)
}

// schemes are what exposure's scheme takes.
var schemes = []string{"http", "https"}

func (c *Config) validateExposure(e *problems) {
	for _, ref := range slices.Sorted(maps.Keys(c.Exposure)) {
		a, f := c.Exposure[ref], fmt.Sprintf("exposure[%q]", ref)
		if !serviceRef.MatchString(ref) {
			e.add("%s: want a Service as NAME or NAME.NAMESPACE", f)
		}
		if a == (PublicAddress{}) {
			e.add("%s: empty (give host, port or scheme)", f)
		}
		if a.Host != "" && !publicHost(a.Host) {
			e.add("%s.host: %q is not an IP address or a DNS name", f, a.Host)
		}
		if a.Port < 0 || a.Port > 65535 {
			e.add("%s.port: %d is not a port", f, a.Port)
		}
		if a.Scheme != "" && !slices.Contains(schemes, a.Scheme) {
			e.add("%s.scheme: %q (want %s)", f, a.Scheme, oneOf(schemes))
		}
	}
}

// oneOf lists the values a field takes: "a, b or c".
func oneOf(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

var dnsName = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*\.?$`)

// publicHost: what may stand for a host in a URL, an IP address or a DNS
// name of at most 253 characters.
func publicHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return !strings.Contains(h, "%") // a zone has no place in a public URL
	}
	return len(h) <= 253 && dnsName.MatchString(h)
}

// superviseModes are what run.supervise takes ("" is auto).
var superviseModes = []string{"auto", "always", "never"}

func (c *Config) validateRun(e *problems) {
	for i, r := range c.Render {
		f := fmt.Sprintf("render[%d]", i)
		if r.Src == "" {
			e.add("%s.src: empty", f)
		}
		if r.Dest == "" {
			e.add("%s.dest: empty", f)
		}
		if r.Perm != "" {
			if _, err := strconv.ParseUint(strings.TrimPrefix(r.Perm, "0o"), 8, 32); err != nil {
				e.add("%s.perm: %q is not an octal mode", f, r.Perm)
			}
		}
	}
	_, err := c.RenderOptions.Timeout.check("renderOptions.timeout")
	e.addErr(err)
	_, err = c.Run.Grace.check("run.grace")
	e.addErr(err)
	switch {
	case c.Run.Supervise != "" && !slices.Contains(superviseModes, c.Run.Supervise):
		e.add("run.supervise: %q (want %s)", c.Run.Supervise, oneOf(superviseModes))
	case c.Run.Supervise == "never" && c.SteadyState():
		e.add("run.supervise: \"never\" execs the service, but probes.checks, reload, logs or bootstrap phases after the rollout need the agent to stay beside it (use auto)")
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func splitWords(s string) ([]string, error) { return shlex.Split(s) }
