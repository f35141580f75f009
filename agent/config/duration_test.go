package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A duration is parsed once, when the config is read: the accessors read
// the value, unset and zero are told apart, a bad one keeps its text for
// the problem, which names its field.
func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		text       string
		set, valid bool
		d          time.Duration
	}{
		{"", false, true, 0},
		{"0", true, true, 0},
		{"90s", true, true, 90 * time.Second},
		{"1h30m", true, true, 90 * time.Minute},
		{"soon", true, false, 0},
		{"-1s", true, false, 0},
	} {
		d := ParseDuration(tc.text)
		if d.IsSet() != tc.set || d.Duration() != tc.d || d.String() != tc.text {
			t.Errorf("%q: set %v, %v, %q", tc.text, d.IsSet(), d.Duration(), d.String())
		}
		_, err := d.check("x.timeout")
		if (err == nil) != tc.valid {
			t.Errorf("%q: check %v", tc.text, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "x.timeout: ") {
			t.Errorf("%q: the problem does not name its field: %v", tc.text, err)
		}
	}
	// defaultTo: unset gives the default, 0 stays 0 (reload.settle: 0 is
	// no wait); defaultZeroTo: 0 gives the default too (run.grace).
	for _, tc := range []struct {
		text     string
		zero     bool
		want     time.Duration
		wantText string
	}{{"", false, time.Minute, ""}, {"0s", false, 0, "0s"}, {"0s", true, time.Minute, "0s"}, {"5s", true, 5 * time.Second, "5s"}} {
		d := ParseDuration(tc.text)
		if tc.zero {
			d.defaultZeroTo(time.Minute)
		} else {
			d.defaultTo(time.Minute)
		}
		if d.Duration() != tc.want || d.String() != tc.wantText {
			t.Errorf("%q (zero %v): %v %q, want %v %q", tc.text, tc.zero, d.Duration(), d.String(), tc.want, tc.wantText)
		}
	}

	// JSON: a string, a number taken as its text (YAML's 30 or 0), null
	// unset; written back as given.
	for in, want := range map[string]string{`"5m"`: "5m", `0`: "0", `30`: "30", `null`: ""} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if d.String() != want {
			t.Errorf("%s read as %q, want %q", in, d.String(), want)
		}
		out, _ := json.Marshal(d)
		if back := ParseDuration(want); string(out) != `"`+want+`"` || back.String() != d.String() || back.Duration() != d.Duration() {
			t.Errorf("%s written as %s", in, out)
		}
	}
	for _, in := range []string{`[1]`, `{"a": 1}`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("%s read as a duration (%q)", in, d.String())
		}
	}
}

// Bad durations are all reported at once, each with its path, as they were
// as strings: a number at a field of agent.yaml's own is its text (YAML's
// conversion), one in a dependency's object is the wrong type (nothing is
// converted under a type that decodes itself), a list or an object is the
// wrong type anywhere.
func TestDurationProblems(t *testing.T) {
	_, err := Parse("agent.yaml", []byte(`dependencies:
  timeout: soon
  wait:
    - {wait: "tcp:127.0.0.1:1", timeout: 30}
    - {wait: "tcp:127.0.0.1:2", timeout: 0}
run:
  grace: -5s
renderOptions:
  timeout: [1]
reload:
  settle: later
  quiet: 30
`))
	for _, want := range []string{
		`agent.yaml: dependencies.timeout: "soon" is not a duration`,
		`agent.yaml: dependencies.wait[0]: cannot unmarshal number 30 into field dependencies.wait[0].timeout (want string)`,
		`agent.yaml: dependencies.wait[1]: cannot unmarshal number 0 into field dependencies.wait[1].timeout (want string)`,
		`agent.yaml: renderOptions: cannot unmarshal array into field renderOptions.timeout (want string)`,
		`agent.yaml: run.grace: negative duration "-5s"`,
		`agent.yaml: reload.quiet: "30" is not a duration`,
		`agent.yaml: reload.settle: "later" is not a duration`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if n := len(Problems(err)); n != 7 {
		t.Errorf("%d problems, want 7:\n%v", n, err)
	}
	// A number that is a duration's text (0) loads at agent.yaml's own
	// fields.
	c, err := Parse("agent.yaml", []byte("run:\n  grace: 0\nreload:\n  settle: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Reload.Settle.Duration() != 0 || c.Run.Grace.Duration() != 30*time.Second {
		t.Errorf("settle %v (want 0: no wait), grace %v (want the default)", c.Reload.Settle.Duration(), c.Run.Grace.Duration())
	}
}

// Every default is in its field once the config is read, the empty one
// too; the text stays unset, so a config written back is what was written.
func TestDefaultsInFields(t *testing.T) {
	for _, c := range []*Config{Empty(), mustParse(t, "{}\n")} {
		if c.Dependencies.Timeout.Duration() != DefaultTimeout || c.Run.Grace.Duration() != DefaultGrace || c.RenderOptions.Timeout.Duration() != DefaultTimeout {
			t.Errorf("defaults: timeout %v, grace %v, render %v", c.Dependencies.Timeout.Duration(), c.Run.Grace.Duration(), c.RenderOptions.Timeout.Duration())
		}
		if c.Bootstrap.Timeout.Duration() != DefaultBootstrapTimeout || c.Bootstrap.LeaseDuration.Duration() != DefaultLeaseDuration {
			t.Errorf("bootstrap defaults: %v, %v", c.Bootstrap.Timeout.Duration(), c.Bootstrap.LeaseDuration.Duration())
		}
		if c.Run.Grace.IsSet() || c.Run.Grace.String() != "" {
			t.Errorf("a default reads as written: %q", c.Run.Grace.String())
		}
	}
	c := mustParse(t, "dependencies:\n  timeout: 5m\nlogs:\n  files: [{path: /var/log/x.log}]\n  sink: {type: stdout}\n")
	if c.RenderOptions.Timeout.Duration() != 5*time.Minute {
		t.Errorf("renderOptions.timeout %v, want the dependency timeout", c.RenderOptions.Timeout.Duration())
	}
	l := c.Logs
	if l.Rescan.Duration() != DefaultLogsRescan || l.Drain.Duration() != DefaultLogsDrain || l.Multiline.Idle.Duration() != DefaultLogsIdle || l.Sink.AckTimeout.Duration() != DefaultLogsAckTimeout || l.StateDir != DefaultLogsStateDir {
		t.Errorf("logs defaults: %+v", l)
	}
	out, err := json.Marshal(c.Run)
	if err != nil || !strings.Contains(string(out), `"grace":""`) {
		t.Errorf("run written back as %s (%v)", out, err)
	}
}

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
