package probes

import (
	"fmt"
	"strings"
	"time"
)

// CheckReport is one line of a probe's verbose answer.
type CheckReport struct {
	Name string `json:"name"`
	// State is pass, fail or pending (no judgement yet).
	State string `json:"state"`
	// Age is how long ago the last look ended; Took how long it ran.
	Age    Duration `json:"age"`
	Took   Duration `json:"took"`
	Reason string   `json:"reason,omitempty"`
	// Counts is false for lines shown for information (a degraded duty).
	Counts bool `json:"counts"`
}

// Report is a probe's answer.
type Report struct {
	Probe  string        `json:"probe"`
	Pass   bool          `json:"pass"`
	Reason string        `json:"reason,omitempty"`
	Checks []CheckReport `json:"checks"`

	// public is Reason without detail: the failing check's name, or
	// "starting" or "draining".
	public string
}

// Public is the report as anyone who can reach the probe port may see it:
// which probe, whether it passes, and the checks' names and states, but no
// reason. A reason can carry a URL, a host name or a service's own words.
func (r Report) Public() Report {
	p := Report{Probe: r.Probe, Pass: r.Pass, Reason: r.public, Checks: make([]CheckReport, len(r.Checks))}
	for i, c := range r.Checks {
		c.Reason = ""
		p.Checks[i] = c
	}
	return p
}

// Duration marshals as Go syntax ("1.5s").
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText reads what MarshalText wrote, so that a Report decodes.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Evaluate judges probe p from the cached results: no I/O, no waiting.
// exclude names checks to leave out; only, when not empty, is the one check
// to judge (/readyz/NAME), without gates or startup.
func (h *Health) Evaluate(p Probe, exclude map[string]bool, only string) (Report, error) {
	now := h.clock.Now()
	rep := Report{Probe: p.String(), Pass: true}
	// fail keeps the first failure; the reason is built only for it.
	fail := func(name, reason string) {
		if rep.Pass {
			rep.Pass, rep.Reason, rep.public = false, reason, reason
			if name != "" {
				rep.Reason, rep.public = name+": "+reason, name
			}
		}
	}
	if only != "" {
		cr, ok := h.one(only, now)
		if !ok {
			return rep, fmt.Errorf("no check named %q", only)
		}
		cr, ok = judge(p, h.byName[only], cr)
		rep.Checks = append(rep.Checks, cr)
		if !ok {
			fail(only, cr.Reason)
		}
		return rep, nil
	}
	gs := h.gatesSnap.Load()
	switch p {
	case Readiness:
		if !h.started.Load() {
			rep.Checks = append(rep.Checks, CheckReport{Name: "startup", State: "fail", Reason: "starting", Counts: true})
			fail("", "starting")
		}
		if h.draining.Load() {
			rep.Checks = append(rep.Checks, CheckReport{Name: "drain", State: "fail", Reason: "draining: " + h.cfg.DrainFile + " exists", Counts: true})
			fail("", "draining")
		}
		for _, g := range gs.gates {
			if exclude[g.name] {
				continue
			}
			rep.Checks = append(rep.Checks, CheckReport{Name: g.name, State: "fail", Reason: g.reason, Counts: true})
			fail(g.name, g.reason)
		}
	case Liveness:
		if !exclude[AgentCheck] {
			cr := h.agentReport(now)
			rep.Checks = append(rep.Checks, cr)
			if cr.State != "pass" {
				fail(AgentCheck, cr.Reason)
			}
		}
	}
	for _, c := range h.checks {
		if !c.probes[p] || exclude[c.spec.Name] {
			continue
		}
		cr, ok := judge(p, c, c.report(now, *h.start.Load()))
		rep.Checks = append(rep.Checks, cr)
		if !ok {
			fail(c.spec.Name, cr.Reason)
		}
	}
	if p == Startup && h.started.Load() {
		rep.Pass, rep.Reason, rep.public = true, "", ""
	}
	for _, g := range gs.notes {
		rep.Checks = append(rep.Checks, CheckReport{Name: g.name, State: "degraded", Reason: g.reason})
	}
	return rep, nil
}

// judge reads a check's line as probe p does: startup asks whether the check
// has passed once, not whether it passes now; liveness lets a check not yet
// judged pass (Kubernetes' liveness starts as success). c is nil for the
// built-in agent check.
func judge(p Probe, c *checkState, cr CheckReport) (CheckReport, bool) {
	if p == Startup && c != nil && c.cur.Load().passedOnce {
		cr.State = "pass"
	}
	return cr, cr.State == "pass" || (p == Liveness && cr.State == "pending")
}

func (h *Health) one(name string, now time.Time) (CheckReport, bool) {
	if name == AgentCheck {
		return h.agentReport(now), true
	}
	c := h.byName[name]
	if c == nil {
		return CheckReport{}, false
	}
	return c.report(now, *h.start.Load()), true
}

// agentStale is how long the agent's own loop may miss its tick before
// liveness fails: the Go runtime is not scheduling the agent's work.
func (h *Health) agentStale() time.Duration { return 5 * h.cfg.Tick }

func (h *Health) agentReport(now time.Time) CheckReport {
	age := now.Sub(time.Unix(0, h.beat.Load()))
	cr := CheckReport{Name: AgentCheck, State: "pass", Age: Duration(age), Reason: "agent loop running", Counts: true}
	if age > h.agentStale() {
		cr.State = "fail"
		cr.Reason = fmt.Sprintf("agent loop stuck: last tick %v ago", age.Round(time.Millisecond))
	}
	return cr
}

// report is a check's line, with the staleness rule applied: a check whose
// checker has not answered for two periods is a failure whatever it said.
func (c *checkState) report(now, start time.Time) CheckReport {
	r := c.cur.Load()
	cr := CheckReport{Name: c.spec.Name, State: r.state.String(), Took: Duration(r.took), Reason: r.reason, Counts: true}
	if !r.at.IsZero() {
		cr.Age = Duration(now.Sub(r.at))
	}
	last := r.answered
	if last.IsZero() {
		last = start
	}
	if stale := now.Sub(last); stale > 2*c.spec.Period {
		cr.State = "fail"
		cr.Reason = fmt.Sprintf("no result for %v (period %v): the check is stuck", stale.Round(time.Millisecond), c.spec.Period)
		if !r.at.IsZero() && !r.ok {
			cr.Reason += ": " + r.reason
		}
		return cr
	}
	switch {
	case r.state == pending && r.at.IsZero():
		// No look yet: the reason set without one ("no result yet").
	case r.state == pending && !r.ok:
		cr.Reason = fmt.Sprintf("%d of %d failures: %s", r.streak, c.spec.FailureThreshold, r.reason)
	case r.state == failing && r.ok:
		cr.Reason = fmt.Sprintf("%d of %d passes: %s", r.streak, c.spec.SuccessThreshold, r.reason)
	case r.state == passing && !r.ok:
		cr.Reason = fmt.Sprintf("%d of %d failures: %s", r.streak, c.spec.FailureThreshold, r.reason)
	}
	return cr
}

// maxReason bounds one reason in an answer, maxBody the whole answer: the
// kubelet reads at most 10 KiB of a probe's body.
const (
	maxReason = 512
	maxBody   = 9 * 1024
)

func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
