package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kolla-agent/kolla-agent/redact"
	"net"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes/ask"
)

// DefaultProbeAddress is where the probe server listens when probes are
// configured and probes.address is not given: a port no OpenStack service or
// kolla exporter uses by default.
const DefaultProbeAddress = ":8095"

// DefaultProbeSocket is the Unix socket of the exec-probe client.
const DefaultProbeSocket = ask.DefaultSocket

// Probes is the probes: section.
type Probes struct {
	// Address is the HTTP listener for the kubelet, HOST:PORT; "off":
	// none. Default: DefaultProbeAddress.
	Address string `json:"address,omitempty"`
	// Socket is the Unix socket for `kolla-agent probe`, an absolute path;
	// "off": none. Default: DefaultProbeSocket.
	Socket string `json:"socket,omitempty"`
	// DrainFile: while it exists, readiness fails with "draining".
	DrainFile string `json:"drainFile,omitempty"`
	// Checks run in the background; each probe answers from the last
	// results of the checks that count for it.
	Checks []Check `json:"checks,omitempty"`
}

// Check is one entry of probes.checks: common fields and exactly one type.
type Check struct {
	// Name names the check in the probes' answers and the metrics: lower
	// case letters, digits, '-', '_' and '.'.
	Name string `json:"name"`
	// Probes lists which of startup, readiness and liveness the check counts
	// for; default [readiness].
	Probes []string `json:"probes,omitempty"`
	// Period is how often the check runs, at least 100ms; default 10s.
	Period Duration `json:"period,omitempty"`
	// Timeout bounds one run, at most the period; default 2s (or the
	// period, when shorter).
	Timeout Duration `json:"timeout,omitempty"`
	// FailureThreshold is how many failures in a row fail the check;
	// default 3.
	FailureThreshold int `json:"failureThreshold,omitempty"`
	// SuccessThreshold is how many successes in a row pass it again;
	// default 1.
	SuccessThreshold int `json:"successThreshold,omitempty"`

	Process     *ProcessCheck     `json:"process,omitempty"`
	TCP         *TCPCheck         `json:"tcp,omitempty"`
	HTTP        *HTTPCheck        `json:"http,omitempty"`
	Exec        *ExecCheck        `json:"exec,omitempty"`
	Connections *ConnectionsCheck `json:"connections,omitempty"`
	File        *FileCheck        `json:"file,omitempty"`
	Dependency  *DependencyCheck  `json:"dependency,omitempty"`
	RPC         *RPCCheck         `json:"rpc,omitempty"`
}

// ProcessCheck: the service's process is alive and not a zombie.
type ProcessCheck struct{}

// TCPCheck: a TCP connection to Address can be made.
type TCPCheck struct {
	// Address to connect to, HOST:PORT.
	Address string `json:"address"`
}

// HTTPCheck: a GET of URL answers with one of ExpectStatus (default 2xx or
// 3xx) and, when BodyRegex is set, a body that matches it.
type HTTPCheck struct {
	// URL to GET, http:// or https://.
	URL string `json:"url"`
	// ExpectStatus lists the status codes that pass (default: any 2xx or
	// 3xx).
	ExpectStatus []int `json:"expectStatus,omitempty"`
	// BodyRegex, when set, must match the body.
	BodyRegex string `json:"bodyRegex,omitempty"`
	// Host is the Host header (and the TLS server name) to send.
	Host string `json:"host,omitempty"`
	// CAFile is the CA bundle that verifies an https server.
	CAFile string `json:"caFile,omitempty"`
	// InsecureSkipVerify does not verify an https server's certificate.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// ExecCheck: the command exits 0 within the timeout. A string is split like
// a shell would; a list is taken as it is.
type ExecCheck struct {
	// Command to run: a string, split like a shell would, or a list of
	// words.
	Command StringOrList `json:"command"`
}

// ConnectionsCheck: the service or any of its descendants holds at least Min
// established TCP connections to each remote port.
type ConnectionsCheck struct {
	// Ports are the remote TCP ports (3306, 5672, ...).
	Ports []int `json:"ports"`
	// Min is how many connections each port needs; default 1.
	Min int `json:"min,omitempty"`
}

// FileCheck: a heartbeat file was modified less than MaxAge ago.
type FileCheck struct {
	// Path of the heartbeat file, absolute.
	Path string `json:"path"`
	// MaxAge is how old its last modification may be.
	MaxAge Duration `json:"maxAge"`
}

// DependencyCheck: a dependency in the wait syntax still resolves.
type DependencyCheck struct {
	// Wait is the dependency in the wait syntax (service:mariadb, ...).
	Wait string `json:"wait"`
}

// RPCCheck: an oslo.messaging RPC call to the service itself answers.
type RPCCheck struct {
	// ConfigFile is the service's own config (transport_url,
	// control_exchange, rpc_ping_enabled are read from it).
	ConfigFile string `json:"configFile,omitempty"`
	// ConfigFiles and ConfigDirs are more of it, read after ConfigFile as
	// oslo.config reads --config-file and then --config-dir (each
	// directory's *.conf in name order; a later value wins). With none of
	// these and no transportURL, the service's own --config-file and
	// --config-dir arguments are read, in their order, and oslo.config's
	// defaults for its name where a kind is not given (run mode).
	ConfigFiles []string `json:"configFiles,omitempty"`
	ConfigDirs  []string `json:"configDirs,omitempty"`
	// TransportURL instead of the config file's.
	TransportURL string `json:"transportURL,omitempty"`
	// Topic is the service's RPC topic (conductor, scheduler, ...).
	Topic string `json:"topic"`
	// Server is the RPC server's host (oslo's [DEFAULT] host); default: the
	// pod's hostname.
	Server string `json:"server,omitempty"`
	// Exchange: default the config's control_exchange, else "openstack".
	Exchange string `json:"exchange,omitempty"`
	// Method to call; default oslo_rpc_server_ping when the config enables
	// it, else a method that does not exist (a NoSuchMethod reply proves the
	// server alive).
	Method string `json:"method,omitempty"`
	// Namespace and Version of the call's target (nova's "baseapi" for ping).
	Namespace string `json:"namespace,omitempty"`
	Version   string `json:"version,omitempty"`
}

// Sidecar is the sidecar: section.
type Sidecar struct {
	// Process says how to find the service in the shared PID namespace.
	Process ProcessMatch `json:"process"`
}

// ProcessMatch finds a process: by pid file, by name (its comm, argv[0] or
// executable's base name), or by a regular expression over its command line
// (arguments joined by spaces).
type ProcessMatch struct {
	// PIDFile holds the service's pid, an absolute path.
	PIDFile string `json:"pidFile,omitempty"`
	// Name is the process's comm, argv[0] or executable's base name.
	Name string `json:"name,omitempty"`
	// Cmdline is a regular expression over the command line.
	Cmdline string `json:"cmdline,omitempty"`
}

// StringOrList is a command given as one string (split like a shell
// would) or as a list of words (taken as they are).
type StringOrList struct {
	String string
	List   []string
}

// UnmarshalJSON accepts either form.
func (s *StringOrList) UnmarshalJSON(b []byte) error {
	if err := jsonUnmarshal(b, &s.String); err == nil {
		return nil
	}
	if err := jsonUnmarshal(b, &s.List); err != nil {
		return fmt.Errorf("want a string or a list of strings")
	}
	return nil
}

// MarshalJSON writes the form it was given.
func (s StringOrList) MarshalJSON() ([]byte, error) {
	if s.List != nil {
		return json.Marshal(s.List)
	}
	return json.Marshal(s.String)
}

// Words is the command as argv.
func (s StringOrList) Words() ([]string, error) {
	if s.List != nil {
		return append([]string(nil), s.List...), nil
	}
	return splitWords(s.String)
}

// probeKinds are the probes a check counts for.
var probeKinds = []string{"startup", "readiness", "liveness"}

var checkName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)

func (c *Config) validateProbes(e *problems) {
	for _, v := range []*string{&c.Probes.Address, &c.Probes.Socket} {
		if ask.Off(*v) {
			*v = "off"
		}
	}
	p := c.Probes
	if p.Address != "" && p.Address != "off" {
		if _, _, err := net.SplitHostPort(p.Address); err != nil {
			e.add("probes.address: %q is not HOST:PORT (want e.g. \":8095\")", p.Address)
		}
	}
	if p.Socket != "" && p.Socket != "off" && !strings.HasPrefix(p.Socket, "/") {
		e.add("probes.socket: %q is not an absolute path", p.Socket)
	}
	if p.DrainFile != "" && !strings.HasPrefix(p.DrainFile, "/") {
		e.add("probes.drainFile: %q is not an absolute path", p.DrainFile)
	}
	seen := map[string]int{}
	for i := range p.Checks {
		validateCheck(e, fmt.Sprintf("probes.checks[%d]", i), &p.Checks[i], seen, i)
	}
	c.validateSidecar(e)
}

func validateCheck(e *problems, f string, ch *Check, seen map[string]int, i int) {
	switch {
	case ch.Name == "":
		e.add("%s.name: empty", f)
	case !checkName.MatchString(ch.Name):
		e.add("%s.name: %q (want lower-case letters, digits, '-', '_' or '.')", f, ch.Name)
	case ch.Name == "agent":
		e.add("%s.name: \"agent\" is the agent's own built-in check", f)
	default:
		if j, dup := seen[ch.Name]; dup {
			e.add("%s.name: %q already used by probes.checks[%d]", f, ch.Name, j)
		} else {
			seen[ch.Name] = i
		}
	}
	for j, pr := range ch.Probes {
		if !slices.Contains(probeKinds, pr) {
			e.add("%s.probes[%d]: %q (want %s)", f, j, pr, oneOf(probeKinds))
		}
	}
	validateTiming(e, f, ch)
	if ch.FailureThreshold < 0 {
		e.add("%s.failureThreshold: negative", f)
	}
	if ch.SuccessThreshold < 0 {
		e.add("%s.successThreshold: negative", f)
	}
	switch types := ch.Types(); len(types) {
	case 0:
		e.add("%s: no check type (want one of process, tcp, http, exec, connections, file, dependency, rpc)", f)
	case 1:
	default:
		e.add("%s: more than one check type (%s); give one per check", f, strings.Join(types, ", "))
	}
	// Each type given is checked, even beside another.
	if ch.TCP != nil {
		if _, _, err := net.SplitHostPort(ch.TCP.Address); err != nil {
			e.add("%s.tcp.address: %q is not HOST:PORT", f, ch.TCP.Address)
		}
	}
	if h := ch.HTTP; h != nil {
		if !strings.HasPrefix(h.URL, "http://") && !strings.HasPrefix(h.URL, "https://") {
			e.add("%s.http.url: %q is not an http:// or https:// URL", f, h.URL)
		}
		for j, code := range h.ExpectStatus {
			if code < 100 || code > 599 {
				e.add("%s.http.expectStatus[%d]: %d is not an HTTP status code", f, j, code)
			}
		}
		if h.BodyRegex != "" {
			if _, err := regexp.Compile(h.BodyRegex); err != nil {
				e.add("%s.http.bodyRegex: %v", f, err)
			}
		}
	}
	if ch.Exec != nil {
		words, err := ch.Exec.Command.Words()
		switch {
		case err != nil:
			e.add("%s.exec.command: %v", f, err)
		case len(words) == 0 || words[0] == "":
			e.add("%s.exec.command: empty", f)
		}
	}
	if cs := ch.Connections; cs != nil {
		if len(cs.Ports) == 0 {
			e.add("%s.connections.ports: empty", f)
		}
		for j, port := range cs.Ports {
			if port < 1 || port > 65535 {
				e.add("%s.connections.ports[%d]: %d is not a TCP port", f, j, port)
			}
		}
		if cs.Min < 0 {
			e.add("%s.connections.min: negative", f)
		}
	}
	if fc := ch.File; fc != nil {
		if !strings.HasPrefix(fc.Path, "/") {
			e.add("%s.file.path: %q is not an absolute path", f, fc.Path)
		}
		if d, err := fc.MaxAge.check(f + ".file.maxAge"); err != nil {
			e.addErr(err)
		} else if d == 0 {
			e.add("%s.file.maxAge: required", f)
		}
	}
	if dc := ch.Dependency; dc != nil {
		if dc.Wait == "" {
			e.add("%s.dependency.wait: empty", f)
		} else if _, err := discovery.Parse(dc.Wait); err != nil {
			e.add("%s.dependency.wait: %v", f, err)
		}
	}
	if r := ch.RPC; r != nil {
		for i, p := range r.ConfigFiles {
			if !path.IsAbs(p) {
				e.add("%s.rpc.configFiles[%d]: %q is not an absolute path", f, i, p)
			}
		}
		for i, p := range r.ConfigDirs {
			if !path.IsAbs(p) {
				e.add("%s.rpc.configDirs[%d]: %q is not an absolute path", f, i, p)
			}
		}
		if r.Topic == "" {
			e.add("%s.rpc.topic: empty", f)
		}
		if r.TransportURL != "" && !strings.Contains(r.TransportURL, "://") {
			e.add("%s.rpc.transportURL: %q is not a URL (want rabbit://USER:PASS@HOST:PORT/VHOST)", f, redact.URL(r.TransportURL))
		}
	}
}

// validateTiming checks a check's period and timeout: each alone, then one
// against the other when both were read.
func validateTiming(e *problems, f string, ch *Check) {
	period, perr := ch.Period.check(f + ".period")
	e.addErr(perr)
	timeout, terr := ch.Timeout.check(f + ".timeout")
	e.addErr(terr)
	if perr == nil && ch.Period.IsSet() && period < 100*time.Millisecond {
		e.add("%s.period: %s is below the minimum of 100ms", f, ch.Period)
		perr = errors.New("too short")
	}
	if terr == nil && ch.Timeout.IsSet() && timeout == 0 {
		e.add("%s.timeout: must be above 0", f)
		terr = errors.New("zero")
	}
	if perr != nil || terr != nil {
		return
	}
	if period == 0 {
		period = DefaultCheckPeriod
	}
	if timeout == 0 {
		timeout = min(DefaultCheckTimeout, period)
	}
	if timeout > period {
		// A result is stale after 2 periods; a longer timeout would let a hung
		// check look stale before it is cancelled.
		e.add("%s.timeout: %v is longer than the period %v", f, timeout, period)
	}
}

func (c *Config) validateSidecar(e *problems) {
	m := c.Sidecar.Process
	n := 0
	for _, v := range []string{m.PIDFile, m.Name, m.Cmdline} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		e.add("sidecar.process: give one of pidFile, name or cmdline")
	}
	if m.PIDFile != "" && !strings.HasPrefix(m.PIDFile, "/") {
		e.add("sidecar.process.pidFile: %q is not an absolute path", m.PIDFile)
	}
	if m.Cmdline != "" {
		if _, err := regexp.Compile(m.Cmdline); err != nil {
			e.add("sidecar.process.cmdline: %v", err)
		}
	}
}

// Check defaults (Kubernetes' own, but the timeout: 1s is too short for a
// Python service's first answer and a check's timeout is cheap here).
const (
	DefaultCheckPeriod  = 10 * time.Second
	DefaultCheckTimeout = 2 * time.Second
)

// Types names the check types the entry sets: one in a valid config.
func (ch *Check) Types() []string {
	var types []string
	for _, t := range []struct {
		name string
		set  bool
	}{
		{"process", ch.Process != nil}, {"tcp", ch.TCP != nil}, {"http", ch.HTTP != nil},
		{"exec", ch.Exec != nil}, {"connections", ch.Connections != nil}, {"file", ch.File != nil},
		{"dependency", ch.Dependency != nil}, {"rpc", ch.RPC != nil},
	} {
		if t.set {
			types = append(types, t.name)
		}
	}
	return types
}

func (ch *Check) withDefaults() {
	ch.Period.defaultZeroTo(DefaultCheckPeriod)
	ch.Timeout.defaultZeroTo(min(DefaultCheckTimeout, ch.Period.Duration()))
	if ch.FailureThreshold == 0 {
		ch.FailureThreshold = 3
	}
	if ch.SuccessThreshold == 0 {
		ch.SuccessThreshold = 1
	}
}

// ProbeList is the check's probes, defaulted to [readiness].
func (ch *Check) ProbeList() []string {
	if len(ch.Probes) == 0 {
		return []string{"readiness"}
	}
	return ch.Probes
}

// SteadyState reports whether any steady-state duty is configured (probes,
// bootstrap phases after the rollout, a catalog that follows a Service's
// public address, reload, log shipping), which makes `run` stay as the
// service's parent in supervise: auto.
func (c *Config) SteadyState() bool {
	return len(c.Probes.Checks) > 0 || c.Bootstrap.HasLater() || c.Bootstrap.FollowsExposure() || c.Reload != nil || c.Logs != nil
}
