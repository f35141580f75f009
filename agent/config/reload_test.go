package config

import (
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every bad reload: section is an error that starts with the file's name
// and names the field.
func TestParseReloadBad(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		// Durations.
		{"quiet not a duration", "reload: {quiet: soon}\n", `reload.quiet: "soon" is not a duration`},
		{"quiet without a unit", "reload: {quiet: 1}\n", `reload.quiet: "1" is not a duration`},
		{"negative quiet", "reload: {quiet: -1s}\n", `reload.quiet: negative duration "-1s"`},
		{"maxWait not a duration", "reload: {maxWait: later}\n", `reload.maxWait: "later" is not a duration`},
		{"negative maxWait", "reload: {maxWait: -10s}\n", `reload.maxWait: negative duration`},
		{"maxWait shorter than quiet", "reload: {quiet: 2s, maxWait: 1s}\n", "reload.maxWait: 1s is shorter than quiet (2s)"},
		{"maxWait shorter than the default quiet", "reload: {maxWait: 500ms}\n", "reload.maxWait: 500ms is shorter than quiet (1s)"},
		{"rescan not a duration", "reload: {rescan: hourly}\n", `reload.rescan: "hourly" is not a duration`},
		{"negative rescan", "reload: {rescan: -60s}\n", `reload.rescan: negative duration`},
		{"verifyTimeout not a duration", "reload: {verifyTimeout: 1 minute}\n", `reload.verifyTimeout: "1 minute" is not a duration`},
		{"negative verifyTimeout", "reload: {verifyTimeout: -1m}\n", `reload.verifyTimeout: negative duration`},
		{"verifyTimeout zero", "reload: {verifyTimeout: 0s}\n", "reload.verifyTimeout: 0"},
		{"settle not within verifyTimeout", "reload: {verifyTimeout: 5s}\n", "reload.settle: 5s is not shorter than verifyTimeout (5s)"},

		// watch.
		{"relative watch dir", "reload:\n  watch: [/var/lib/kolla/config_files, config_files]\n", `reload.watch[1]: "config_files" is not an absolute path`},
		{"empty watch dir", "reload:\n  watch: [\"\"]\n", `reload.watch[0]: "" is not an absolute path`},
		{"watch not a list", "reload: {watch: /var/lib/kolla/config_files}\n", "reload.watch"},

		// action and actions.
		{"unknown action", "reload: {action: reboot}\n", `reload.action: "reboot" (want signal, restart, rollout or none)`},
		{"action in capitals", "reload: {action: SIGNAL}\n", `reload.action: "SIGNAL"`},
		{"override without a path", "reload:\n  actions:\n    - {action: none}\n", "reload.actions[0].path: empty"},
		{"override with a relative path", "reload:\n  actions:\n    - {path: \"etc/apache2/*\", action: none}\n", `reload.actions[0].path: "etc/apache2/*" is not an absolute path`},
		{"override with a bad glob", "reload:\n  actions:\n    - {path: \"/etc/apache2/[\", action: none}\n", `reload.actions[0].path: "/etc/apache2/[": syntax error in pattern`},
		{"override with a trailing backslash", "reload:\n  actions:\n    - {path: \"/etc/a\\\\\", action: none}\n", `reload.actions[0].path: "/etc/a\\": syntax error in pattern`},
		{"override without an action", "reload:\n  actions:\n    - {path: /etc/a, action: none}\n    - {path: /etc/b}\n", `reload.actions[1].action: "" (want signal, restart, rollout or none)`},
		{"override with an unknown action", "reload:\n  actions:\n    - {path: /etc/a, action: none}\n    - {path: /etc/b, action: sighup}\n", `reload.actions[1].action: "sighup"`},
		{"override with an unknown field", "reload:\n  actions:\n    - {path: /etc/a, action: none, signal: SIGUSR1}\n", `unknown field "signal"`},
		{"actions not a list", "reload: {actions: {path: /etc/a, action: none}}\n", "reload.actions"},

		// signal.
		{"signal that kills", "reload: {signal: SIGKILL}\n", `reload.signal: "SIGKILL" is not a signal a service reloads on`},
		{"signal without SIG that kills", "reload: {signal: kill}\n", `reload.signal: "kill" is not a signal`},
		{"signal as a number", "reload: {signal: 1}\n", `reload.signal: "1" is not a signal`},
		{"signal with SIG twice", "reload: {signal: SIGSIGHUP}\n", `reload.signal: "SIGSIGHUP"`},
		{"signal SIG alone", "reload: {signal: SIG}\n", `reload.signal: "SIG"`},
		{"signal unknown", "reload: {signal: SIGRELOAD}\n", `reload.signal: "SIGRELOAD"`},

		// stateDir.
		{"relative stateDir", "reload: {stateDir: var/lib/kolla-agent/reload}\n", `reload.stateDir: "var/lib/kolla-agent/reload" is not an absolute path`},
		{"dot stateDir", "reload: {stateDir: .}\n", `reload.stateDir: "." is not an absolute path`},

		// validate.
		{"validator without dest", "reload:\n  validate:\n    - {command: \"check {{ .Staged }}\"}\n", "reload.validate[0].dest: empty"},
		{"validator with a relative dest", "reload:\n  validate:\n    - {dest: keystone.conf, command: \"check {{ .Staged }}\"}\n", `reload.validate[0].dest: "keystone.conf" is not an absolute path`},
		{"validator without command", "reload:\n  validate:\n    - {dest: /etc/keystone/keystone.conf}\n", "reload.validate[0].command: empty"},
		{"validator with a blank command", "reload:\n  validate:\n    - {dest: /etc/keystone/keystone.conf, command: \"  \"}\n", "reload.validate[0].command: empty"},
		{"validator of the live file", "reload:\n  validate:\n    - {dest: /etc/keystone/keystone.conf, command: \"oslo-config-validator --namespace keystone --input-file {{ .Dest }}\"}\n", `reload.validate[0].command: "oslo-config-validator --namespace keystone --input-file {{ .Dest }}" does not name the staged file`},
		{"validator with the live path spelt out", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check /etc/a.conf\"}\n", "reload.validate[0].command: \"check /etc/a.conf\" does not name the staged file"},
		{"dest validated twice", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check {{ .Staged }}\"}\n    - {dest: /etc/b.conf, command: \"check {{ .Staged }}\"}\n    - {dest: /etc/a.conf, command: \"other {{ .Staged }}\"}\n", "reload.validate[2].dest: /etc/a.conf has a validator already"},
		{"validator with an unclosed action", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check {{ .Staged \"}\n", "reload.validate[0].command: template: :1: unclosed action"},
		{"validator with a misspelt field", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check {{ .Staged }} {{ .Dst }}\"}\n", `reload.validate[0].command: template: :1:`},
		{"validator with an unknown function", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check {{ .Staged | shellquote }}\"}\n", `reload.validate[0].command: template: :1: function "shellquote" not defined`},
		{"validator with an unclosed quote", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check '{{ .Staged }}\"}\n", "reload.validate[0].command: EOF found when expecting closing quote"},
		{"validator with an unknown field", "reload:\n  validate:\n    - {dest: /etc/a.conf, cmd: \"check {{ .Staged }}\"}\n", `unknown field "cmd"`},
		{"validator as a string", "reload:\n  validate: [\"check {{ .Staged }}\"]\n", "reload.validate"},
		{"second validator bad", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check {{ .Staged }}\"}\n    - {dest: /etc/b.conf, command: \"\"}\n", "reload.validate[1].command: empty"},

		// The section itself.
		{"unknown field", "reload: {quite: 1s}\n", `unknown field "quite"`},
		{"unknown source", "reload: {source: etcd}\n", `reload.source: "etcd" (want volume or api)`},
		{"maxUnavailable without a lease name", "reload: {maxUnavailable: 1}\n", "reload.leaseName: needed with maxUnavailable"},
		{"negative maxUnavailable", "reload: {maxUnavailable: -1, leaseName: glance}\n", "reload.maxUnavailable: -1 is negative"},
		{"maxUnavailable too large", "reload: {maxUnavailable: 101, leaseName: glance}\n", "reload.maxUnavailable: 101 is more Leases"},
		{"bad lease name", "reload: {maxUnavailable: 1, leaseName: Glance_API}\n", `reload.leaseName: "Glance_API" is not a DNS label`},
		{"staged only in a template comment", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check {{ .Dest }} {{/* .Staged */}}\"}\n", "does not name the staged file"},
		{"staged only in a shell comment", "reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"check /etc/a.conf # .Staged\"}\n", "does not name the staged file"},
		{"unclean dest", "reload:\n  validate:\n    - {dest: /etc//a.conf, command: \"check {{ .Staged }}\"}\n", `reload.validate[0].dest: "/etc//a.conf" is not a clean path (/etc/a.conf)`},
		{"reload as a list", "reload: [signal]\n", "field reload"},
		{"reload as a string", "reload: signal\n", "agent.yaml: "},
		// Reload is a steady-state duty: the agent must stay beside the service.
		{"reload with supervise never", "run: {supervise: never}\nreload: {}\n", `run.supervise: "never"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("agent.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for %q: %+v", tc.yaml, c.Reload)
			}
			if !strings.HasPrefix(err.Error(), "agent.yaml: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to start with the file name and contain %q", err, tc.want)
			}
		})
	}
}

func TestParseReloadOnOff(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		on         bool
	}{
		{"absent", "namespace: openstack\n", false},
		{"null", "reload:\n", false},
		{"explicit null", "reload: null\n", false},
		{"empty map", "reload: {}\n", true},
		{"one field", "reload:\n  quiet: 2s\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("agent.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if on := c.Reload != nil; on != tc.on {
				t.Errorf("reload on = %v, want %v", on, tc.on)
			}
			if c.Reload != nil && !c.SteadyState() {
				t.Error("a config with reload: is not a steady-state one")
			}
		})
	}
}

// reload: {} turns the reload on with every default.
func TestReloadDefaults(t *testing.T) {
	c, err := Parse("agent.yaml", []byte("reload: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Reload
	q, m, rs, v := r.Quiet.Duration(), r.MaxWait.Duration(), r.Rescan.Duration(), r.VerifyTimeout.Duration()
	if q != time.Second || m != 10*time.Second || rs != 60*time.Second || v != 60*time.Second {
		t.Errorf("durations = %v, %v, %v, %v; want 1s, 10s, 1m0s, 1m0s", q, m, rs, v)
	}
	if q != DefaultReloadQuiet || m != DefaultReloadMaxWait || rs != DefaultReloadRescan || v != DefaultReloadVerify {
		t.Error("the defaulted durations differ from the Default* constants")
	}
	if got := r.ActionFor("/etc/keystone/keystone.conf"); got != "signal" || DefaultReloadAction != "signal" {
		t.Errorf("ActionFor = %q, want signal", got)
	}
	if got := r.SignalNumber(); got != syscall.SIGHUP {
		t.Errorf("SignalNumber() = %v, want SIGHUP", got)
	}
	if len(r.Watch) != 0 || len(r.Validate) != 0 || len(r.Actions) != 0 || r.StateDir != DefaultReloadStateDir {
		t.Errorf("reload: {} filled in something without a default, or not the state directory: %+v", r)
	}
	if DefaultReloadStateDir != "/var/lib/kolla-agent/reload" {
		t.Errorf("default state dir %q", DefaultReloadStateDir)
	}
}

// The example, every field given.
func TestParseReloadFull(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`
reload:
  watch: [/var/lib/kolla/config_files, /etc/keystone/secrets]
  quiet: 500ms
  maxWait: 5s
  rescan: 2m
  action: signal
  actions:
    - {path: "/etc/apache2/*", action: none}
    - {path: /etc/keystone/policy.yaml, action: none}
  signal: usr1
  verifyTimeout: 90s
  stateDir: /run/kolla-agent/reload
  validate:
    - dest: /etc/keystone/keystone.conf
      command: oslo-config-validator --namespace keystone --namespace oslo.log --input-file {{ .Staged }}
    - dest: /etc/keystone/keystone-paste.ini
      command: "check --dest {{ .Dest }} {{ .Staged }}"
`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Reload
	want := &Reload{
		Watch:   []string{"/var/lib/kolla/config_files", "/etc/keystone/secrets"},
		Quiet:   ParseDuration("500ms"),
		MaxWait: ParseDuration("5s"),
		Rescan:  ParseDuration("2m"),
		Action:  "signal",
		Actions: []ReloadAction{
			{Path: "/etc/apache2/*", Action: "none"},
			{Path: "/etc/keystone/policy.yaml", Action: "none"},
		},
		Signal:        "usr1",
		VerifyTimeout: ParseDuration("90s"),
		StateDir:      "/run/kolla-agent/reload",
		Validate: []ReloadValidate{
			{Dest: "/etc/keystone/keystone.conf", Command: "oslo-config-validator --namespace keystone --namespace oslo.log --input-file {{ .Staged }}"},
			{Dest: "/etc/keystone/keystone-paste.ini", Command: "check --dest {{ .Dest }} {{ .Staged }}"},
		},
	}
	want.withDefaults()
	if !reflect.DeepEqual(r, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", r, want)
	}
	q, m, rs, v := r.Quiet.Duration(), r.MaxWait.Duration(), r.Rescan.Duration(), r.VerifyTimeout.Duration()
	if q != 500*time.Millisecond || m != 5*time.Second || rs != 2*time.Minute || v != 90*time.Second {
		t.Errorf("durations = %v, %v, %v, %v", q, m, rs, v)
	}
	if got := r.SignalNumber(); got != syscall.SIGUSR1 {
		t.Errorf("SignalNumber() = %v, want SIGUSR1", got)
	}
}

// Durations: each field apart, and zero where zero is allowed.
func TestReloadDurations(t *testing.T) {
	for _, tc := range []struct {
		yaml                 string
		quiet, maxWait, scan time.Duration
		verify               time.Duration
	}{
		{"reload: {quiet: 0s}\n", 0, 10 * time.Second, time.Minute, time.Minute},
		{"reload: {quiet: 0s, maxWait: 0s}\n", 0, 0, time.Minute, time.Minute},
		{"reload: {quiet: 3s, maxWait: 3s}\n", 3 * time.Second, 3 * time.Second, time.Minute, time.Minute},
		{"reload: {quiet: 5s}\n", 5 * time.Second, 10 * time.Second, time.Minute, time.Minute},
		{"reload: {maxWait: 1s}\n", time.Second, time.Second, time.Minute, time.Minute},
		{"reload: {rescan: 0s}\n", time.Second, 10 * time.Second, 0, time.Minute},
		{"reload: {rescan: 1h30m}\n", time.Second, 10 * time.Second, 90 * time.Minute, time.Minute},
		{"reload: {verifyTimeout: 1ms, settle: 0s}\n", time.Second, 10 * time.Second, time.Minute, time.Millisecond},
	} {
		c, err := Parse("agent.yaml", []byte(tc.yaml))
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		q, m, rs, v := c.Reload.Quiet.Duration(), c.Reload.MaxWait.Duration(), c.Reload.Rescan.Duration(), c.Reload.VerifyTimeout.Duration()
		if q != tc.quiet || m != tc.maxWait || rs != tc.scan || v != tc.verify {
			t.Errorf("%q: durations = %v, %v, %v, %v; want %v, %v, %v, %v", tc.yaml, q, m, rs, v, tc.quiet, tc.maxWait, tc.scan, tc.verify)
		}
	}
}

// ActionFor: the first override whose glob matches the destination, else
// the section's action, else signal.
func TestReloadActionFor(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`
reload:
  action: none
  actions:
    - {path: /etc/keystone/keystone.conf, action: restart}
    - {path: "/etc/apache2/*/*.conf", action: restart}
    - {path: "/etc/apache2/*", action: rollout}
    - {path: "/etc/keystone/*.conf", action: signal}
    - {path: "/etc/keystone/*.[jy]*", action: rollout}
    - {path: "/etc/keystone/policy.?aml", action: signal}
`))
	if err != nil {
		t.Fatal(err)
	}
	for dest, want := range map[string]string{
		"/etc/keystone/keystone.conf":                   "restart", // exact and first, before *.conf
		"/etc/keystone/sso_callback_template.conf":      "signal",
		"/etc/apache2/conf-enabled/wsgi-keystone.conf":  "restart",
		"/etc/apache2/ports.conf":                       "rollout",
		"/etc/apache2/conf-enabled/wsgi-keystone.load":  "none",    // * stops at a slash: the section's
		"/etc/keystone/policy.yaml":                     "rollout", // the earlier of two matches
		"/etc/keystone/policy.json":                     "rollout",
		"/etc/keystone/a.yml":                           "rollout",
		"/etc/keystone/policy.xaml":                     "signal", // only the later one matches
		"/etc/keystone/keystone.conf.d/cache.conf":      "none",   // * does not cross into a subdirectory
		"/etc/keystone/fernet-keys/0":                   "none",
		"/etc/keystone":                                 "none",
		"/etc/keystone/keystone.conf/":                  "none",
		"/var/lib/kolla/config_files/keystone.conf":     "none",
		"/etc/apache2/conf-enabled/sub/wsgi-keystone.c": "none",
	} {
		if got := c.Reload.ActionFor(dest); got != want {
			t.Errorf("ActionFor(%s) = %q, want %q", dest, got, want)
		}
	}

	// Without a section action, what no override matches is signalled.
	c, err = Parse("agent.yaml", []byte("reload:\n  actions:\n    - {path: \"/etc/apache2/*\", action: none}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for dest, want := range map[string]string{
		"/etc/apache2/apache2.conf":   "none",
		"/etc/keystone/keystone.conf": "signal",
	} {
		if got := c.Reload.ActionFor(dest); got != want {
			t.Errorf("ActionFor(%s) = %q, want %q", dest, got, want)
		}
	}
	// Every action the config accepts, as an override and as the section's.
	for _, a := range []string{"signal", "restart", "rollout", "none"} {
		c, err := Parse("agent.yaml", []byte("reload:\n  action: "+a+"\n  actions:\n    - {path: /etc/x, action: "+a+"}\n"))
		if err != nil {
			t.Errorf("action %s: %v", a, err)
			continue
		}
		if c.Reload.ActionFor("/etc/x") != a || c.Reload.ActionFor("/etc/y") != a {
			t.Errorf("action %s: ActionFor gives %q, %q", a, c.Reload.ActionFor("/etc/x"), c.Reload.ActionFor("/etc/y"))
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{
		"":         syscall.SIGHUP,
		"SIGHUP":   syscall.SIGHUP,
		"HUP":      syscall.SIGHUP,
		"hup":      syscall.SIGHUP,
		"sighup":   syscall.SIGHUP,
		"SigHup":   syscall.SIGHUP,
		"SIGUSR1":  syscall.SIGUSR1,
		"usr1":     syscall.SIGUSR1,
		"Usr2":     syscall.SIGUSR2,
		"sigusr2":  syscall.SIGUSR2,
		"INT":      syscall.SIGINT,
		"SIGQUIT":  syscall.SIGQUIT,
		"winch":    syscall.SIGWINCH,
		"SIGTERM":  syscall.SIGTERM,
		"sigwinch": syscall.SIGWINCH,
	} {
		got, err := ParseSignal(in)
		if err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"KILL", "SIGKILL", "sigstop", "CONT", "1", "9", "SIG", "SIGSIGHUP", " HUP", "HUP ", "SIG_HUP", "SIGUSR3", "hangup"} {
		if got, err := ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "SIGHUP, SIGUSR1") {
			t.Errorf("ParseSignal(%q): %v does not list the signals it takes", in, err)
		}
	}
	// Through the config: the spelling is kept, the number is resolved.
	for in, want := range map[string]syscall.Signal{"usr1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "hup": syscall.SIGHUP} {
		c, err := Parse("agent.yaml", []byte("reload: {signal: "+in+"}\n"))
		if err != nil {
			t.Errorf("signal %s: %v", in, err)
			continue
		}
		if c.Reload.Signal != in || c.Reload.SignalNumber() != want {
			t.Errorf("signal %s: kept %q, number %v", in, c.Reload.Signal, c.Reload.SignalNumber())
		}
	}
}

// Validators that load: either placeholder, quoted or not, in any word.
func TestParseReloadValidateGood(t *testing.T) {
	for _, cmd := range []string{
		"oslo-config-validator --namespace keystone --input-file {{ .Staged }}",
		"{{.Staged}}",
		"check --in={{ .Staged }} --for {{ .Dest }}",
		`sh -c 'haproxy -c -f "$1"' sh {{ .Staged }}`,
		`python3 -c "import json,sys; json.load(open(sys.argv[1]))" {{ .Staged }}`,
		"  apachectl -t -f {{ .Staged }}  ",
	} {
		c, err := Parse("agent.yaml", []byte("reload:\n  validate:\n    - dest: /etc/a.conf\n      command: '"+strings.ReplaceAll(cmd, "'", "''")+"'\n"))
		if err != nil {
			t.Errorf("%s: %v", cmd, err)
			continue
		}
		if got := c.Reload.Validate[0].Command; got != cmd {
			t.Errorf("command %q read as %q", cmd, got)
		}
	}
	// One validator per destination; several destinations.
	if _, err := Parse("agent.yaml", []byte("reload:\n  validate:\n    - {dest: /etc/a.conf, command: \"a {{ .Staged }}\"}\n    - {dest: /etc/b.conf, command: \"a {{ .Staged }}\"}\n")); err != nil {
		t.Error(err)
	}
}

// The strongest action of the changed files wins: none < signal < restart
// < rollout, a file without its own taking reload.action.
func TestReloadStrongest(t *testing.T) {
	r := &Reload{Action: "signal", Actions: []ReloadAction{
		{Path: "/etc/apache2/*", Action: "none"},
		{Path: "/etc/keystone/fernet-keys/*", Action: "restart"},
		{Path: "/etc/keystone/rollout.conf", Action: "rollout"},
	}}
	for _, tc := range []struct {
		changed []string
		want    string
	}{
		{nil, "none"},
		{[]string{"/etc/apache2/a.conf"}, "none"},
		{[]string{"/etc/apache2/a.conf", "/etc/keystone/keystone.conf"}, "signal"},
		{[]string{"/etc/keystone/fernet-keys/0", "/etc/keystone/keystone.conf"}, "restart"},
		{[]string{"/etc/keystone/rollout.conf", "/etc/keystone/fernet-keys/0"}, "rollout"},
	} {
		if got := r.Strongest(tc.changed); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.changed, got, tc.want)
		}
	}
}
