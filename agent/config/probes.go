package config

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
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
	// Address is the HTTP listener for the kubelet ("" = DefaultProbeAddress,
	// "off" = none).
	Address string `json:"address,omitempty"`
	// Socket is the Unix socket for `kolla-agent probe` ("" =
	// DefaultProbeSocket, "off" = none).
	Socket string `json:"socket,omitempty"`
	// DrainFile: while it exists, readiness fails with "draining".
	DrainFile string  `json:"drainFile,omitempty"`
	Checks    []Check `json:"checks,omitempty"`
}

// Check is one entry of probes.checks: common fields and exactly one type.
type Check struct {
	Name string `json:"name"`
	// Probes lists which of startup, readiness and liveness the check counts
	// for; default [readiness].
	Probes           []string `json:"probes,omitempty"`
	Period           string   `json:"period,omitempty"`  // default 10s
	Timeout          string   `json:"timeout,omitempty"` // default 1s
	FailureThreshold int      `json:"failureThreshold,omitempty"`
	SuccessThreshold int      `json:"successThreshold,omitempty"`

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
	Address string `json:"address"`
}

// HTTPCheck: a GET of URL answers with one of ExpectStatus (default 2xx or
// 3xx) and, when BodyRegex is set, a body that matches it.
type HTTPCheck struct {
	URL                string `json:"url"`
	ExpectStatus       []int  `json:"expectStatus,omitempty"`
	BodyRegex          string `json:"bodyRegex,omitempty"`
	Host               string `json:"host,omitempty"`
	CAFile             string `json:"caFile,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
}

// ExecCheck: the command exits 0 within the timeout. A string is split like
// a shell would; a list is taken as it is.
type ExecCheck struct {
	Command StringOrList `json:"command"`
}

// ConnectionsCheck: the service or any of its descendants holds at least Min
// established TCP connections to each remote port.
type ConnectionsCheck struct {
	Ports []int `json:"ports"`
	Min   int   `json:"min,omitempty"` // default 1
}

// FileCheck: a heartbeat file was modified less than MaxAge ago.
type FileCheck struct {
	Path   string `json:"path"`
	MaxAge string `json:"maxAge"`
}

// DependencyCheck: a dependency in the wait syntax still resolves.
type DependencyCheck struct {
	Wait string `json:"wait"`
}

// RPCCheck: an oslo.messaging RPC call to the service itself answers.
type RPCCheck struct {
	// ConfigFile is the service's own config (transport_url,
	// control_exchange, rpc_ping_enabled are read from it).
	ConfigFile string `json:"configFile,omitempty"`
	// TransportURL instead of the config file's.
	TransportURL string `json:"transportURL,omitempty"`
	Topic        string `json:"topic"`
	// Server is the RPC server's host (oslo's [DEFAULT] host); default: the
	// pod's hostname.
	Server string `json:"server,omitempty"`
	// Exchange defaults to control_exchange, else "openstack".
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
	PIDFile string `json:"pidFile,omitempty"`
	Name    string `json:"name,omitempty"`
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

// probe names.
var probeNames = map[string]bool{"startup": true, "readiness": true, "liveness": true}

var checkName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)

func (c *Config) validateProbes() error {
	for _, v := range []*string{&c.Probes.Address, &c.Probes.Socket} {
		if ask.Off(*v) {
			*v = "off"
		}
	}
	p := c.Probes
	for _, a := range []struct{ field, v string }{{"probes.address", p.Address}} {
		if a.v == "" || a.v == "off" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s: %q is not HOST:PORT (want e.g. \":8095\")", a.field, a.v)
		}
	}
	if p.Socket != "" && p.Socket != "off" && !strings.HasPrefix(p.Socket, "/") {
		return fmt.Errorf("probes.socket: %q is not an absolute path", p.Socket)
	}
	if p.DrainFile != "" && !strings.HasPrefix(p.DrainFile, "/") {
		return fmt.Errorf("probes.drainFile: %q is not an absolute path", p.DrainFile)
	}
	seen := map[string]int{}
	for i := range p.Checks {
		if err := validateCheck(fmt.Sprintf("probes.checks[%d]", i), &p.Checks[i], seen, i); err != nil {
			return err
		}
	}
	return c.validateSidecar()
}

func validateCheck(f string, ch *Check, seen map[string]int, i int) error {
	switch {
	case ch.Name == "":
		return fmt.Errorf("%s.name: empty", f)
	case !checkName.MatchString(ch.Name):
		return fmt.Errorf("%s.name: %q (want lower-case letters, digits, '-', '_' or '.')", f, ch.Name)
	case ch.Name == "agent":
		return fmt.Errorf("%s.name: \"agent\" is the agent's own built-in check", f)
	}
	if j, dup := seen[ch.Name]; dup {
		return fmt.Errorf("%s.name: %q already used by probes.checks[%d]", f, ch.Name, j)
	}
	seen[ch.Name] = i
	for j, pr := range ch.Probes {
		if !probeNames[pr] {
			return fmt.Errorf("%s.probes[%d]: %q (want startup, readiness or liveness)", f, j, pr)
		}
	}
	period, err := parseDuration(f+".period", ch.Period)
	if err != nil {
		return err
	}
	timeout, err := parseDuration(f+".timeout", ch.Timeout)
	if err != nil {
		return err
	}
	if ch.Period != "" && period < 100*time.Millisecond {
		return fmt.Errorf("%s.period: %s is below the minimum of 100ms", f, ch.Period)
	}
	if period == 0 {
		period = DefaultCheckPeriod
	}
	if ch.Timeout != "" && timeout == 0 {
		return fmt.Errorf("%s.timeout: must be above 0", f)
	}
	if timeout == 0 {
		timeout = min(DefaultCheckTimeout, period)
	}
	if timeout > period {
		// A result is stale after 2 periods; a longer timeout would let a hung
		// check look stale before it is cancelled.
		return fmt.Errorf("%s.timeout: %v is longer than the period %v", f, timeout, period)
	}
	if ch.FailureThreshold < 0 {
		return fmt.Errorf("%s.failureThreshold: negative", f)
	}
	if ch.SuccessThreshold < 0 {
		return fmt.Errorf("%s.successThreshold: negative", f)
	}
	var types []string
	add := func(name string, set bool) {
		if set {
			types = append(types, name)
		}
	}
	add("process", ch.Process != nil)
	add("tcp", ch.TCP != nil)
	add("http", ch.HTTP != nil)
	add("exec", ch.Exec != nil)
	add("connections", ch.Connections != nil)
	add("file", ch.File != nil)
	add("dependency", ch.Dependency != nil)
	add("rpc", ch.RPC != nil)
	switch len(types) {
	case 0:
		return fmt.Errorf("%s: no check type (want one of process, tcp, http, exec, connections, file, dependency, rpc)", f)
	case 1:
	default:
		return fmt.Errorf("%s: more than one check type (%s); give one per check", f, strings.Join(types, ", "))
	}
	switch {
	case ch.TCP != nil:
		if _, _, err := net.SplitHostPort(ch.TCP.Address); err != nil {
			return fmt.Errorf("%s.tcp.address: %q is not HOST:PORT", f, ch.TCP.Address)
		}
	case ch.HTTP != nil:
		h := ch.HTTP
		if !strings.HasPrefix(h.URL, "http://") && !strings.HasPrefix(h.URL, "https://") {
			return fmt.Errorf("%s.http.url: %q is not an http:// or https:// URL", f, h.URL)
		}
		for j, code := range h.ExpectStatus {
			if code < 100 || code > 599 {
				return fmt.Errorf("%s.http.expectStatus[%d]: %d is not an HTTP status code", f, j, code)
			}
		}
		if h.BodyRegex != "" {
			if _, err := regexp.Compile(h.BodyRegex); err != nil {
				return fmt.Errorf("%s.http.bodyRegex: %v", f, err)
			}
		}
	case ch.Exec != nil:
		words, err := ch.Exec.Command.Words()
		if err != nil {
			return fmt.Errorf("%s.exec.command: %v", f, err)
		}
		if len(words) == 0 || words[0] == "" {
			return fmt.Errorf("%s.exec.command: empty", f)
		}
	case ch.Connections != nil:
		if len(ch.Connections.Ports) == 0 {
			return fmt.Errorf("%s.connections.ports: empty", f)
		}
		for j, port := range ch.Connections.Ports {
			if port < 1 || port > 65535 {
				return fmt.Errorf("%s.connections.ports[%d]: %d is not a TCP port", f, j, port)
			}
		}
		if ch.Connections.Min < 0 {
			return fmt.Errorf("%s.connections.min: negative", f)
		}
	case ch.File != nil:
		if !strings.HasPrefix(ch.File.Path, "/") {
			return fmt.Errorf("%s.file.path: %q is not an absolute path", f, ch.File.Path)
		}
		d, err := parseDuration(f+".file.maxAge", ch.File.MaxAge)
		if err != nil {
			return err
		}
		if d == 0 {
			return fmt.Errorf("%s.file.maxAge: required", f)
		}
	case ch.Dependency != nil:
		if ch.Dependency.Wait == "" {
			return fmt.Errorf("%s.dependency.wait: empty", f)
		}
		if _, err := discovery.Parse(ch.Dependency.Wait); err != nil {
			return fmt.Errorf("%s.dependency.wait: %v", f, err)
		}
	case ch.RPC != nil:
		r := ch.RPC
		if r.ConfigFile == "" && r.TransportURL == "" {
			return fmt.Errorf("%s.rpc: give configFile (the service's own config, for transport_url) or transportURL", f)
		}
		if r.Topic == "" {
			return fmt.Errorf("%s.rpc.topic: empty", f)
		}
		if r.TransportURL != "" && !strings.Contains(r.TransportURL, "://") {
			return fmt.Errorf("%s.rpc.transportURL: %q is not a URL (want rabbit://USER:PASS@HOST:PORT/VHOST)", f, redactURL(r.TransportURL))
		}
	}
	return nil
}

// redactURL hides whatever could be a password in an error message.
func redactURL(s string) string {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "***" + s[i:]
	}
	return s
}

func (c *Config) validateSidecar() error {
	m := c.Sidecar.Process
	n := 0
	for _, v := range []string{m.PIDFile, m.Name, m.Cmdline} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("sidecar.process: give one of pidFile, name or cmdline")
	}
	if m.PIDFile != "" && !strings.HasPrefix(m.PIDFile, "/") {
		return fmt.Errorf("sidecar.process.pidFile: %q is not an absolute path", m.PIDFile)
	}
	if m.Cmdline != "" {
		if _, err := regexp.Compile(m.Cmdline); err != nil {
			return fmt.Errorf("sidecar.process.cmdline: %v", err)
		}
	}
	return nil
}

// Check defaults (Kubernetes' own, but the timeout: 1s is too short for a
// Python service's first answer and a check's timeout is cheap here).
const (
	DefaultCheckPeriod  = 10 * time.Second
	DefaultCheckTimeout = 2 * time.Second
)

// CheckTiming is a check's period, timeout and thresholds, defaulted.
func (ch *Check) CheckTiming() (period, timeout time.Duration, failure, success int) {
	period, _ = parseDuration("", ch.Period)
	if period == 0 {
		period = DefaultCheckPeriod
	}
	timeout, _ = parseDuration("", ch.Timeout)
	if timeout == 0 {
		timeout = min(DefaultCheckTimeout, period)
	}
	failure, success = ch.FailureThreshold, ch.SuccessThreshold
	if failure == 0 {
		failure = 3
	}
	if success == 0 {
		success = 1
	}
	return
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
