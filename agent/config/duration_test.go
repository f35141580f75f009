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
	// Or: unset gives the default, 0 stays 0 (reload.settle: 0 is no
	// wait); PositiveOr: 0 gives the default too (run.grace).
	if got := ParseDuration("").Or(time.Minute); got != time.Minute {
		t.Errorf("unset Or: %v", got)
	}
	if got := ParseDuration("0s").Or(time.Minute); got != 0 {
		t.Errorf("0s Or: %v", got)
	}
	if got := ParseDuration("0s").PositiveOr(time.Minute); got != time.Minute {
		t.Errorf("0s PositiveOr: %v", got)
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
	if c.Reload.SettleDuration() != 0 || c.Grace() != 30*time.Second {
		t.Errorf("settle %v (want 0: no wait), grace %v (want the default)", c.Reload.SettleDuration(), c.Grace())
	}
}
