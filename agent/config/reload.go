package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Reload is the reload: section: when a ConfigMap volume changes, render the
// config again, check it, commit it, make the service take it, verify, and
// roll back when it is not ready.
type Reload struct {
	// Watch lists the mount directories of the ConfigMap volumes; default:
	// the kolla config dir and the directories of the render sources.
	Watch []string `json:"watch,omitempty"`
	// Source is where a change comes from: volume (the kubelet updates the
	// mounted volume), or api (the ConfigMaps are watched through the API
	// and taken at once; the volume stays the fallback).
	Source string `json:"source,omitempty"`
	// Quiet is the debounce quiet period, MaxWait the longest a burst can
	// delay the action, Rescan how often the volumes are looked at anyway.
	Quiet   Duration `json:"quiet,omitempty"`
	MaxWait Duration `json:"maxWait,omitempty"`
	Rescan  Duration `json:"rescan,omitempty"`
	// Action is what the service is made to do: signal, restart, rollout,
	// none; Actions override it per file.
	Action  string         `json:"action,omitempty"`
	Actions []ReloadAction `json:"actions,omitempty"`
	// Signal is sent to the service's process group by action signal.
	Signal string `json:"signal,omitempty"`
	// VerifyTimeout bounds how long the service may take to be ready again.
	VerifyTimeout Duration `json:"verifyTimeout,omitempty"`
	// Settle is the longest a signalled service may take to take the
	// signal: readiness counts only from the moment every worker process
	// it had before the signal has exited, or from Settle after the
	// signal, whichever comes first. A graceful reload (uWSGI, apache,
	// oslo.service) keeps the old workers answering for a while, and a
	// pass they give proves nothing about the new config. 0: from the
	// signal.
	Settle Duration `json:"settle,omitempty"`
	// Validate lists commands that must accept a staged file.
	Validate []ReloadValidate `json:"validate,omitempty"`
	// StateDir keeps the staged sets and the applied, good and bad hashes.
	StateDir string `json:"stateDir,omitempty"`
	// MaxUnavailable, above 0, bounds how many replicas signal or restart
	// their service at once (until it is verified), through Leases
	// <leaseName>-0 .. -N-1; 0: no bound.
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
	// LeaseName names those Leases; default kolla-reload-<bootstrap.name>.
	LeaseName string `json:"leaseName,omitempty"`
}

// ReloadAction overrides the action for the files matching Path (a glob of
// path.Match over the destination).
type ReloadAction struct {
	// Path is a glob over the destination files, absolute.
	Path string `json:"path"`
	// Action for the files it matches: signal, restart, rollout or none.
	Action string `json:"action"`
}

// ReloadValidate is a validator of one destination file: Command is a
// template with {{ .Staged }} and {{ .Dest }} (paths, quoted for the
// split), then split into words like a shell would.
type ReloadValidate struct {
	// Dest is the destination file the command checks, absolute.
	Dest string `json:"dest"`
	// Command checks the staged file, {{ .Staged }}, before it replaces
	// {{ .Dest }}.
	Command string `json:"command"`
}

// Reload defaults.
const (
	DefaultReloadQuiet    = time.Second
	DefaultReloadMaxWait  = 10 * time.Second
	DefaultReloadRescan   = 60 * time.Second
	DefaultReloadVerify   = 60 * time.Second
	DefaultReloadSettle   = 5 * time.Second
	DefaultReloadAction   = "signal"
	DefaultReloadSignal   = "SIGHUP"
	DefaultReloadStateDir = "/var/lib/kolla-agent/reload"
)

// ReloadLease is the semaphore's Lease name prefix ("" without maxUnavailable).
func (c *Config) ReloadLease() string {
	r := c.Reload
	switch {
	case r == nil || r.MaxUnavailable == 0:
		return ""
	case r.LeaseName != "":
		return r.LeaseName
	}
	return "kolla-reload-" + c.Bootstrap.Name
}

// ActionFor is the action for the file at dest.
func (r *Reload) ActionFor(dest string) string {
	for _, a := range r.Actions {
		if ok, _ := path.Match(a.Path, dest); ok {
			return a.Action
		}
	}
	if r.Action == "" {
		return DefaultReloadAction
	}
	return r.Action
}

// withDefaults: in the reload, 0 is a value (settle 0: no wait).
func (r *Reload) withDefaults() {
	r.Quiet.defaultTo(DefaultReloadQuiet)
	r.MaxWait.defaultTo(DefaultReloadMaxWait)
	r.Rescan.defaultTo(DefaultReloadRescan)
	r.VerifyTimeout.defaultTo(DefaultReloadVerify)
	r.Settle.defaultTo(DefaultReloadSettle)
	if r.StateDir == "" {
		r.StateDir = DefaultReloadStateDir
	}
}

// Strongest is the strongest action any of the changed files asks for:
// none, signal, restart, rollout.
func (r *Reload) Strongest(changed []string) string {
	action := "none"
	rank := map[string]int{"none": 0, "signal": 1, "restart": 2, "rollout": 3}
	for _, f := range changed {
		if x := r.ActionFor(f); rank[x] > rank[action] {
			action = x
		}
	}
	return action
}

// SignalNumber is the configured signal, defaulted.
func (r *Reload) SignalNumber() syscall.Signal {
	s, _ := ParseSignal(r.Signal) // validated
	return s
}

var reloadSignals = map[string]syscall.Signal{
	"SIGHUP": syscall.SIGHUP, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
	"SIGINT": syscall.SIGINT, "SIGQUIT": syscall.SIGQUIT, "SIGWINCH": syscall.SIGWINCH,
	"SIGTERM": syscall.SIGTERM,
}

// ParseSignal reads a signal name with or without its SIG prefix, any
// case; "" is SIGHUP.
func ParseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		s = DefaultReloadSignal
	}
	n := strings.ToUpper(s)
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	if sig, ok := reloadSignals[n]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("%q is not a signal a service reloads on (want one of SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT, SIGWINCH, SIGTERM)", s)
}

// reloadActions are what reload.action and reload.actions[].action take.
var reloadActions = []string{"signal", "restart", "rollout", "none"}

// reloadSources are what reload.source takes ("" is volume).
var reloadSources = []string{"volume", "api"}

func (c *Config) validateReload(e *problems) {
	r := c.Reload
	if r == nil {
		return
	}
	durs := map[string]error{}
	for _, f := range []struct {
		name string
		v    Duration
	}{{"quiet", r.Quiet}, {"maxWait", r.MaxWait}, {"rescan", r.Rescan}, {"verifyTimeout", r.VerifyTimeout}, {"settle", r.Settle}} {
		_, err := f.v.check("reload." + f.name)
		e.addErr(err)
		durs[f.name] = err
	}
	q, m, v, settle := r.Quiet.or(DefaultReloadQuiet), r.MaxWait.or(DefaultReloadMaxWait), r.VerifyTimeout.or(DefaultReloadVerify), r.Settle.or(DefaultReloadSettle)
	if durs["quiet"] == nil && durs["maxWait"] == nil && r.MaxWait.IsSet() && m < q {
		e.add("reload.maxWait: %s is shorter than quiet (%s)", m, q)
	}
	if durs["verifyTimeout"] == nil && r.VerifyTimeout.IsSet() && v == 0 {
		e.add("reload.verifyTimeout: 0 (a reload must be verified within some time)")
	}
	if durs["verifyTimeout"] == nil && durs["settle"] == nil && settle >= v {
		e.add("reload.settle: %s is not shorter than verifyTimeout (%s), which includes it: every signal would be rolled back", settle, v)
	}
	if r.Source != "" && !slices.Contains(reloadSources, r.Source) {
		e.add("reload.source: %q (want %s)", r.Source, oneOf(reloadSources))
	}
	for i, w := range r.Watch {
		if !path.IsAbs(w) {
			e.add("reload.watch[%d]: %q is not an absolute path", i, w)
		}
	}
	if r.Action != "" && !slices.Contains(reloadActions, r.Action) {
		e.add("reload.action: %q (want %s)", r.Action, oneOf(reloadActions))
	}
	for i, a := range r.Actions {
		f := fmt.Sprintf("reload.actions[%d]", i)
		switch {
		case a.Path == "":
			e.add("%s.path: empty", f)
		case !path.IsAbs(a.Path):
			e.add("%s.path: %q is not an absolute path", f, a.Path)
		default:
			if _, err := path.Match(a.Path, "/"); err != nil {
				e.add("%s.path: %q: %v", f, a.Path, err)
			}
		}
		if !slices.Contains(reloadActions, a.Action) {
			e.add("%s.action: %q (want %s)", f, a.Action, oneOf(reloadActions))
		}
	}
	if _, err := ParseSignal(r.Signal); err != nil {
		e.add("reload.signal: %v", err)
	}
	switch {
	case r.MaxUnavailable < 0:
		e.add("reload.maxUnavailable: %d is negative", r.MaxUnavailable)
	case r.MaxUnavailable > 100:
		e.add("reload.maxUnavailable: %d is more Leases than a semaphore should take (at most 100)", r.MaxUnavailable)
	}
	switch {
	case r.MaxUnavailable > 0 && r.LeaseName == "" && c.Bootstrap.Name == "":
		e.add("reload.leaseName: needed with maxUnavailable (a name every replica of the service shares), or set bootstrap.name")
	case r.LeaseName != "" && (len(r.LeaseName) > 59 || !dnsLabel.MatchString(r.LeaseName)):
		e.add("reload.leaseName: %q is not a DNS label of at most 59 characters", r.LeaseName)
	}
	if r.StateDir != "" && !path.IsAbs(r.StateDir) {
		e.add("reload.stateDir: %q is not an absolute path", r.StateDir)
	}
	seen := map[string]bool{}
	for i, v := range r.Validate {
		f := fmt.Sprintf("reload.validate[%d]", i)
		switch {
		case v.Dest == "":
			e.add("%s.dest: empty", f)
		case !path.IsAbs(v.Dest):
			e.add("%s.dest: %q is not an absolute path", f, v.Dest)
		case seen[path.Clean(v.Dest)]:
			e.add("%s.dest: %s has a validator already", f, v.Dest)
		case v.Dest != path.Clean(v.Dest):
			seen[path.Clean(v.Dest)] = true
			e.add("%s.dest: %q is not a clean path (%s)", f, v.Dest, path.Clean(v.Dest))
		default:
			seen[v.Dest] = true
		}
		if strings.TrimSpace(v.Command) == "" {
			e.add("%s.command: empty", f)
			continue
		}
		if staged, err := checkTemplate(v.Command); err != nil {
			e.add("%s.command: %v", f, err)
		} else if !staged {
			e.add("%s.command: %q does not name the staged file ({{ .Staged }}): it would check the live one", f, v.Command)
		}
	}
}

// checkTemplate parses and executes a validator's command with sample
// values and splits it into words, so a misspelt {{ .Stagd }} or an
// unclosed quote is an error now, not at the first reload. staged: a word
// holds the staged file's path.
func checkTemplate(cmd string) (staged bool, err error) {
	t, err := template.New("").Option("missingkey=error").Parse(cmd)
	if err != nil {
		return false, err
	}
	const sample = "/kolla-agent-staged-sample"
	var b strings.Builder
	if err := t.Execute(&b, map[string]string{"Staged": sample, "Dest": "/dest"}); err != nil {
		return false, err
	}
	words, err := splitWords(b.String())
	if err != nil {
		return false, err
	}
	for _, w := range words {
		if strings.Contains(w, sample) {
			return true, nil
		}
	}
	return false, nil
}
