package probes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func realClock() clock.WithTicker { return clock.RealClock{} }

// coreCheck is a Checker the test drives: each look runs the function last
// given to set. It counts looks, looks running at once, and Close calls.
type coreCheck struct {
	mu      sync.Mutex
	fn      func(ctx context.Context) (string, error)
	looks   atomic.Int64
	running atomic.Int64
	maxRun  atomic.Int64
	closed  atomic.Int64
}

func newCoreCheck(fn func(ctx context.Context) (string, error)) *coreCheck {
	return &coreCheck{fn: fn}
}

func (c *coreCheck) set(fn func(ctx context.Context) (string, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fn = fn
}

func (c *coreCheck) Check(ctx context.Context) (string, error) {
	c.looks.Add(1)
	n := c.running.Add(1)
	defer c.running.Add(-1)
	for {
		m := c.maxRun.Load()
		if n <= m || c.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	c.mu.Lock()
	fn := c.fn
	c.mu.Unlock()
	return fn(ctx)
}

func (c *coreCheck) Close() error {
	c.closed.Add(1)
	return nil
}

func corePass(detail string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return detail, nil }
}

func coreFail(reason string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return "", errors.New(reason) }
}

// coreHang is a look that ignores its context until release is closed, then
// fails.
func coreHang(entered chan<- struct{}, release <-chan struct{}) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		if entered != nil {
			entered <- struct{}{}
		}
		<-release
		return "", errors.New("gave up late")
	}
}

// corePoll polls cond every millisecond until it holds or 5s pass.
func corePoll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// coreEnv is a Health with a fake clock, its registry and its Run.
type coreEnv struct {
	t   *testing.T
	h   *Health
	fc  *clocktesting.FakeClock
	reg *prometheus.Registry
	run func() // starts Run; stopped by the test's cleanup
}

func coreNew(t *testing.T, cfg Config) *coreEnv {
	t.Helper()
	e := &coreEnv{t: t, reg: prometheus.NewPedanticRegistry()}
	if cfg.Clock == nil {
		e.fc = clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		cfg.Clock = e.fc
	}
	if cfg.Tick == 0 {
		// The agent's loop must not go stale while a test steps the clock
		// by check periods; its own test sets Tick.
		cfg.Tick = time.Hour
	}
	cfg.Registerer = e.reg
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	e.run = func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Run: %v", err)
					}
					return
				case <-deadline:
					t.Errorf("Run did not return after its context ended")
					return
				case <-time.After(time.Millisecond):
					if e.fc != nil {
						// Run waits a hung look's timeout and grace on its clock.
						e.fc.Step(time.Hour)
					}
				}
			}
		})
	}
	return e
}

func (e *coreEnv) cur(name string) *result { return e.h.byName[name].cur.Load() }

// next waits for a result of check name other than prev.
func (e *coreEnv) next(name string, prev *result) *result {
	e.t.Helper()
	var r *result
	corePoll(e.t, "a new result of "+name, func() bool {
		r = e.cur(name)
		return r != prev
	})
	return r
}

// step moves the fake clock by d and waits for check name's next result.
func (e *coreEnv) step(name string, d time.Duration) *result {
	e.t.Helper()
	prev := e.cur(name)
	e.fc.Step(d)
	return e.next(name, prev)
}

func (e *coreEnv) eval(p Probe) Report {
	e.t.Helper()
	rep, err := e.h.Evaluate(p, nil, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

func (e *coreEnv) line(p Probe, name string) CheckReport {
	e.t.Helper()
	for _, c := range e.eval(p).Checks {
		if c.Name == name {
			return c
		}
	}
	e.t.Fatalf("%s has no line %q", p, name)
	return CheckReport{}
}

func TestHealthProbeNames(t *testing.T) {
	for _, p := range []Probe{Startup, Readiness, Liveness} {
		got, err := ParseProbe(p.String())
		if err != nil || got != p {
			t.Errorf("ParseProbe(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParseProbe("ready"); err == nil {
		t.Error("ParseProbe(ready): no error")
	}
}

func TestHealthNewRejects(t *testing.T) {
	ok := Spec{Name: "db", Probes: []Probe{Readiness}, Period: time.Second, Timeout: time.Second, Checker: newCoreCheck(corePass(""))}
	tests := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"no name", func(s *Spec) { s.Name = "" }, "no name"},
		{"reserved name", func(s *Spec) { s.Name = AgentCheck }, "reserved"},
		{"no checker", func(s *Spec) { s.Checker = nil }, "no checker"},
		{"zero period", func(s *Spec) { s.Period = 0 }, "period"},
		{"zero timeout", func(s *Spec) { s.Timeout = 0 }, "timeout"},
		{"timeout above period", func(s *Spec) { s.Timeout = 2 * time.Second }, "timeout"},
		{"no probe", func(s *Spec) { s.Probes = nil }, "no probe"},
		{"unknown probe", func(s *Spec) { s.Probes = []Probe{Probe(7)} }, "probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			_, err := New(Config{Checks: []Spec{s}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("twice", func(t *testing.T) {
		_, err := New(Config{Checks: []Spec{ok, ok}})
		if err == nil || !strings.Contains(err.Error(), "twice") {
			t.Fatalf("New: error %v, want one about a check given twice", err)
		}
	})
	t.Run("valid", func(t *testing.T) {
		h, err := New(Config{Checks: []Spec{ok}})
		if err != nil {
			t.Fatal(err)
		}
		if c := h.byName["db"]; c.spec.FailureThreshold != 3 || c.spec.SuccessThreshold != 1 {
			t.Errorf("default thresholds %d/%d, want Kubernetes' 3/1", c.spec.FailureThreshold, c.spec.SuccessThreshold)
		}
	})
}

// TestHealthThresholds drives one check look by look on a fake clock and
// judges it with Kubernetes' meanings of failureThreshold and
// successThreshold: consecutive looks, readiness starting as failed.
func TestHealthThresholds(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		passes   int
		looks    string // P pass, F fail
		want     []string
	}{
		{"defaults 3/1", 0, 0, "PFFFP", []string{"pass", "pass", "pass", "fail", "pass"}},
		{"1/1 follows every look", 1, 1, "PFPF", []string{"pass", "fail", "pass", "fail"}},
		{"pending until the first threshold", 3, 1, "FFFP", []string{"pending", "pending", "fail", "pass"}},
		{"passes must be consecutive to recover", 2, 3, "FFPPFPPP", []string{"pending", "fail", "fail", "fail", "fail", "fail", "fail", "pass"}},
		{"failures must be consecutive to fail", 2, 2, "PPFPFPFF", []string{"pending", "pass", "pass", "pass", "pass", "pass", "pass", "fail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const period = 10 * time.Second
			chk := newCoreCheck(corePass(""))
			e := coreNew(t, Config{Checks: []Spec{{
				Name: "db", Probes: []Probe{Readiness, Liveness}, Period: period, Timeout: time.Second,
				FailureThreshold: tt.failures, SuccessThreshold: tt.passes, Checker: chk,
			}}})
			for i, l := range tt.looks {
				if l == 'P' {
					chk.set(corePass("up"))
				} else {
					chk.set(coreFail("down"))
				}
				if i == 0 {
					prev := e.cur("db")
					e.run()
					e.next("db", prev)
				} else {
					e.step("db", period)
				}
				cr := e.line(Readiness, "db")
				if cr.State != tt.want[i] {
					t.Fatalf("look %d (%s): state %s (%s), want %s", i+1, tt.looks[:i+1], cr.State, cr.Reason, tt.want[i])
				}
				if ready := e.eval(Readiness).Pass; ready != (tt.want[i] == "pass") {
					t.Errorf("look %d: readiness %v with the check %s", i+1, ready, cr.State)
				}
				if live := e.eval(Liveness).Pass; live != (tt.want[i] != "fail") {
					t.Errorf("look %d: liveness %v with the check %s (pending passes liveness)", i+1, live, cr.State)
				}
				// A look against the judged state says how far it is.
				if (l == 'F') != (tt.want[i] == "fail") && tt.want[i] != "pending" && !strings.Contains(cr.Reason, " of ") {
					t.Errorf("look %d: reason %q does not count toward the threshold", i+1, cr.Reason)
				}
			}
			if n := chk.looks.Load(); n != int64(len(tt.looks)) {
				t.Errorf("%d looks, want one per period: %d", n, len(tt.looks))
			}
		})
	}
}

// TestHealthStartup: startup passes once every startup check has passed
// once and stays passed; until then readiness fails with "starting".
func TestHealthStartup(t *testing.T) {
	const period = 10 * time.Second
	boot, warm, db := newCoreCheck(coreFail("no")), newCoreCheck(coreFail("cold")), newCoreCheck(corePass("ok"))
	spec := func(name string, c Checker, ps ...Probe) Spec {
		return Spec{Name: name, Probes: ps, Period: period, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1, Checker: c}
	}
	e := coreNew(t, Config{Checks: []Spec{
		spec("boot", boot, Startup, Readiness),
		spec("warm", warm, Startup),
		spec("db", db, Readiness),
	}})
	all := func(fn func(*coreCheck)) {
		for _, c := range []*coreCheck{boot, warm, db} {
			fn(c)
		}
	}
	waitAll := func(prev map[string]*result) {
		for n, r := range prev {
			e.next(n, r)
		}
	}
	snap := func() map[string]*result {
		return map[string]*result{"boot": e.cur("boot"), "warm": e.cur("warm"), "db": e.cur("db")}
	}
	expect := func(stage string, startup, ready bool, readyReason string) {
		t.Helper()
		if got := e.eval(Startup); got.Pass != startup {
			t.Errorf("%s: startup %v (%s), want %v", stage, got.Pass, got.Reason, startup)
		}
		got := e.eval(Readiness)
		if got.Pass != ready || !strings.HasPrefix(got.Reason, readyReason) {
			t.Errorf("%s: readiness %v %q, want %v %q", stage, got.Pass, got.Reason, ready, readyReason)
		}
		if e.h.Started() != startup {
			t.Errorf("%s: Started() = %v", stage, e.h.Started())
		}
		if !e.eval(Liveness).Pass {
			t.Errorf("%s: liveness fails: startup checks are no part of it", stage)
		}
	}

	expect("before any look", false, false, "starting")
	prev := snap()
	e.run()
	waitAll(prev)
	expect("startup checks failing", false, false, "starting")

	boot.set(corePass("up"))
	prev = snap()
	e.fc.Step(period)
	waitAll(prev)
	expect("one of two startup checks passed", false, false, "starting")

	// warm passes while boot fails again: each has passed once.
	boot.set(coreFail("no"))
	warm.set(corePass("warm"))
	prev = snap()
	e.fc.Step(period)
	waitAll(prev)
	corePoll(t, "the startup latch", e.h.Started)
	expect("every startup check passed once", true, false, "boot: ")

	all(func(c *coreCheck) { c.set(coreFail("gone")) })
	prev = snap()
	e.fc.Step(period)
	waitAll(prev)
	expect("latched", true, false, "boot: ")
	// /startupz/NAME latches as /startupz does.
	if rep, err := e.h.Evaluate(Startup, nil, "warm"); err != nil || !rep.Pass {
		t.Errorf("/startupz/warm after it passed once and now fails: %+v %v, want pass", rep, err)
	}
	if rep, _ := e.h.Evaluate(Readiness, nil, "boot"); rep.Pass {
		t.Errorf("/readyz/boot while it fails: pass")
	}

	all(func(c *coreCheck) { c.set(corePass("back")) })
	prev = snap()
	e.fc.Step(period)
	waitAll(prev)
	expect("all passing", true, true, "")
}

// The service's process replaced (Restarted): startup and readiness fail
// at once, liveness passes, a look of the old process that passes after
// the change is not recorded (the next look, of the new one, is), and both
// pass again once the check passes on the new process.
func TestHealthRestarted(t *testing.T) {
	const period = 10 * time.Second
	svc := newCoreCheck(corePass("up"))
	e := coreNew(t, Config{Checks: []Spec{{Name: "svc", Probes: []Probe{Startup, Readiness}, Period: period, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 1, Checker: svc}}})
	prev := e.cur("svc")
	e.run()
	e.next("svc", prev)
	corePoll(t, "the startup latch", e.h.Started)
	if !e.eval(Readiness).Pass {
		t.Fatal("readiness fails before the restart")
	}

	entered, release := make(chan struct{}, 1), make(chan struct{})
	svc.set(func(context.Context) (string, error) { // the old process answers late
		entered <- struct{}{}
		<-release
		return "the old process", nil
	})
	e.fc.Step(period)
	<-entered
	e.h.Restarted()
	reset := e.cur("svc")
	if e.h.Started() || e.eval(Startup).Pass {
		t.Error("startup passes after the process changed")
	}
	if e.eval(Readiness).Pass {
		t.Error("readiness passes after the process changed")
	}
	if l := e.line(Readiness, "svc"); l.State != "pending" || !strings.Contains(l.Reason, "process changed") {
		t.Errorf("the check after the process changed: %s %q, want pending, saying why", l.State, l.Reason)
	}
	if !e.eval(Liveness).Pass {
		t.Error("liveness fails after the process changed")
	}
	coreMetric(t, "kolla_agent_check_passing after the process changed", e.h.metrics.passing.WithLabelValues("svc"), 0)
	coreMetric(t, "kolla_agent_check_failures_total after the process changed (a reset is no failure)", e.h.metrics.failures.WithLabelValues("svc"), 0)

	svc.set(coreFail("the new process is not up"))
	close(release)
	r := e.next("svc", reset)
	if r.ok || r.reason != "the new process is not up" {
		t.Errorf("after the old look returned: ok %v %q, want the new process's look", r.ok, r.reason)
	}
	if e.eval(Readiness).Pass || e.h.Started() {
		t.Error("the old process's late pass made the check pass")
	}

	svc.set(corePass("the new process"))
	e.step("svc", period)
	corePoll(t, "the startup latch again", e.h.Started)
	if !e.eval(Readiness).Pass {
		t.Error("readiness fails once the new process passes")
	}
}

// A restart while a look of the old process is being recorded (past the
// generation test) waits for that record, and then starts over: the old
// pass must not latch startup again after the latch was cleared.
func TestHealthRestartedWhileRecording(t *testing.T) {
	const period = 10 * time.Second
	svc := newCoreCheck(coreFail("not up yet"))
	e := coreNew(t, Config{Checks: []Spec{{Name: "svc", Probes: []Probe{Startup, Readiness}, Period: period, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 1, Checker: svc}}})
	in, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.h.testRecording = func(ok bool) {
		if ok {
			once.Do(func() { close(in); <-release })
		}
	}
	prev := e.cur("svc")
	e.run()
	e.next("svc", prev)
	svc.set(corePass("the old process"))
	e.fc.Step(period)
	<-in // its pass is past the generation test, not yet recorded

	restarted := make(chan struct{})
	go func() { e.h.Restarted(); close(restarted) }()
	select { // a restart that does not wait shows here; one that waits cannot be told from a slow one
	case <-restarted:
	case <-time.After(50 * time.Millisecond):
	}
	svc.set(coreFail("the new process is not up"))
	close(release)
	<-restarted
	if l := e.line(Readiness, "svc"); l.State != "pending" {
		t.Errorf("the check after the restart: %s %q, want pending", l.State, l.Reason)
	}
	// Restarted asked for a look now (no clock step); once it is in, the
	// old pass has been recorded too, before the restart or after it.
	corePoll(t, "the new process's look", func() bool { r := e.cur("svc"); return !r.at.IsZero() && !r.ok })
	if e.h.Started() {
		t.Error("startup latched on the old process's pass, after the restart")
	}
}

func TestHealthStartupWithoutStartupChecks(t *testing.T) {
	e := coreNew(t, Config{})
	if !e.h.Started() || !e.eval(Startup).Pass || !e.eval(Readiness).Pass || !e.eval(Liveness).Pass {
		t.Fatal("with no startup check, startup must have passed and nothing fail")
	}
}

// TestHealthLivenessScope: checks count for liveness only when marked so,
// and the built-in "agent" line is always there.
func TestHealthLivenessScope(t *testing.T) {
	const period = 10 * time.Second
	dep, proc := newCoreCheck(coreFail("broker down")), newCoreCheck(corePass("pid 7"))
	e := coreNew(t, Config{Checks: []Spec{
		{Name: "broker", Probes: []Probe{Readiness}, Period: period, Timeout: time.Second, FailureThreshold: 1, Checker: dep},
		{Name: "process", Probes: []Probe{Liveness}, Period: period, Timeout: time.Second, FailureThreshold: 1, Checker: proc},
	}})
	prevB, prevP := e.cur("broker"), e.cur("process")
	e.run()
	e.next("broker", prevB)
	e.next("process", prevP)

	live := e.eval(Liveness)
	if !live.Pass {
		t.Fatalf("liveness fails (%s) though only a readiness check fails", live.Reason)
	}
	var names []string
	for _, c := range live.Checks {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "agent,process" {
		t.Errorf("liveness lines %v, want [agent process]", names)
	}
	if ready := e.eval(Readiness); ready.Pass || !strings.HasPrefix(ready.Reason, "broker: ") {
		t.Errorf("readiness %v %q, want a failure for broker", ready.Pass, ready.Reason)
	}

	proc.set(coreFail("pid 7 is a zombie"))
	e.step("process", period)
	if live := e.eval(Liveness); live.Pass || !strings.Contains(live.Reason, "zombie") {
		t.Errorf("liveness %v %q, want a failure of the liveness check", live.Pass, live.Reason)
	}
	if _, err := e.h.Evaluate(Readiness, nil, "nope"); err == nil {
		t.Error("Evaluate of an unknown check: no error")
	}
}

// TestHealthAgentLoop: the built-in liveness check fails once the agent's
// own loop has not ticked for 5 ticks, and passes while it runs.
func TestHealthAgentLoop(t *testing.T) {
	const tick = time.Second
	e := coreNew(t, Config{Tick: tick})
	// Run not called: the loop does not tick.
	e.fc.Step(5 * tick)
	if !e.eval(Liveness).Pass {
		t.Fatal("liveness fails at 5 ticks; the limit is above that")
	}
	e.fc.Step(time.Millisecond)
	live := e.eval(Liveness)
	if live.Pass || !strings.Contains(live.Reason, "agent loop stuck") {
		t.Fatalf("liveness %v %q with a stuck loop, want agent loop stuck", live.Pass, live.Reason)
	}
	if e.eval(Readiness).Pass != true {
		t.Error("readiness follows the agent loop; it should not")
	}
	if rep, _ := e.h.Evaluate(Liveness, map[string]bool{AgentCheck: true}, ""); !rep.Pass {
		t.Error("?exclude=agent still fails liveness")
	}
	if rep, err := e.h.Evaluate(Liveness, nil, AgentCheck); err != nil || rep.Pass {
		t.Errorf("/livez/agent: pass=%v err=%v, want a failure", rep.Pass, err)
	}

	e.run()
	// The loop beats at once, then on each tick.
	corePoll(t, "the loop's first beat", func() bool { return e.eval(Liveness).Pass })
	for range 5 {
		e.fc.Step(6 * tick) // stale unless the loop beats on this tick
		corePoll(t, "a beat", func() bool { return e.eval(Liveness).Pass })
	}
}

// TestHealthDrainFile: the drain file is looked at by the agent's loop on
// its tick, never by a request.
func TestHealthDrainFile(t *testing.T) {
	const tick = time.Second
	drain := filepath.Join(t.TempDir(), "drain")
	if err := os.WriteFile(drain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := coreNew(t, Config{Tick: tick, DrainFile: drain})
	if !e.eval(Readiness).Pass {
		t.Fatal("a request looked at the drain file")
	}
	e.run()
	// The loop looks once at its start, then blocks until the next tick.
	corePoll(t, "draining", func() bool { return !e.eval(Readiness).Pass })
	rep := e.eval(Readiness)
	if rep.Reason != "draining" {
		t.Errorf("reason %q, want draining", rep.Reason)
	}
	if !e.eval(Liveness).Pass || !e.eval(Startup).Pass {
		t.Error("draining fails liveness or startup")
	}
	if err := os.Remove(drain); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if e.eval(Readiness).Pass {
			t.Fatal("a request looked at the drain file")
		}
	}
	e.fc.Step(tick)
	corePoll(t, "the drain to end", func() bool { return e.eval(Readiness).Pass })
	if err := os.WriteFile(drain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if !e.eval(Readiness).Pass {
			t.Fatal("a request looked at the drain file")
		}
	}
	e.fc.Step(tick)
	corePoll(t, "draining again", func() bool { return !e.eval(Readiness).Pass })
}

// TestHealthGates: a gate fails readiness at once, liveness never.
func TestHealthGates(t *testing.T) {
	e := coreNew(t, Config{})
	tests := []struct {
		name, reason string
		wantReason   string
	}{
		{"stopping", "the agent is stopping", "stopping: the agent is stopping"},
		{"bootstrap", "", "bootstrap: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.h.SetGate(tt.name, tt.reason)
			rep := e.eval(Readiness)
			if rep.Pass || rep.Reason != tt.wantReason {
				t.Errorf("readiness %v %q, want a failure %q", rep.Pass, rep.Reason, tt.wantReason)
			}
			if !e.eval(Liveness).Pass || !e.eval(Startup).Pass {
				t.Error("a gate fails liveness or startup")
			}
			e.h.ClearGate(tt.name)
			if rep := e.eval(Readiness); !rep.Pass {
				t.Errorf("readiness fails after ClearGate: %s", rep.Reason)
			}
		})
	}
	t.Run("two gates, one cleared", func(t *testing.T) {
		e.h.SetGate("stopping", "stopping")
		e.h.SetGate("reload", "config changed")
		e.h.SetGate("reload", "config changed again")
		e.h.ClearGate("stopping")
		e.h.ClearGate("never-set")
		if rep := e.eval(Readiness); rep.Pass || rep.Reason != "reload: config changed again" {
			t.Errorf("readiness %v %q", rep.Pass, rep.Reason)
		}
		e.h.ClearGate("reload")
	})
	t.Run("degraded fails nothing", func(t *testing.T) {
		e.h.SetDegraded("logs", "cannot ship logs")
		for _, p := range []Probe{Startup, Readiness, Liveness} {
			rep := e.eval(p)
			if !rep.Pass {
				t.Errorf("%s fails on a degraded duty", p)
			}
			last := rep.Checks[len(rep.Checks)-1]
			if last.Name != "logs" || last.State != "degraded" || last.Counts {
				t.Errorf("%s: degraded line %+v", p, last)
			}
		}
		e.h.SetDegraded("logs", "")
		for _, c := range e.eval(Readiness).Checks {
			if c.Name == "logs" {
				t.Error("the degraded line stays after it was cleared")
			}
		}
	})
}

// TestHealthTimeoutCancels: a look that outlives its timeout has its
// context ended, and its answer is a failure even if it says pass.
func TestHealthTimeoutCancels(t *testing.T) {
	const timeout = 30 * time.Millisecond
	tests := []struct {
		name   string
		answer func(ctx context.Context) (string, error)
	}{
		{"returns the context's error", func(ctx context.Context) (string, error) { return "", ctx.Err() }},
		{"claims a pass after its deadline", func(ctx context.Context) (string, error) { return "fine", nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type seen struct {
				err             error
				deadline, ended time.Time
			}
			seenc := make(chan seen, 10)
			chk := newCoreCheck(func(ctx context.Context) (string, error) {
				deadline, _ := ctx.Deadline()
				<-ctx.Done()
				seenc <- seen{ctx.Err(), deadline, time.Now()}
				return tt.answer(ctx)
			})
			e := coreNew(t, Config{Clock: realClock(), Tick: time.Second, Checks: []Spec{{
				Name: "slow", Probes: []Probe{Readiness}, Period: time.Hour, Timeout: timeout, FailureThreshold: 1, Checker: chk,
			}}})
			prev := e.cur("slow")
			// The timeout is measured from before Run: the look's context
			// is made after that, so a loaded machine that starts the look
			// late moves its deadline later, never earlier (measured from
			// inside the look, a late start ate the 5 ms margin).
			began := time.Now()
			e.run()
			var s seen
			select {
			case s = <-seenc:
			case <-time.After(5 * time.Second):
				t.Fatal("the look's context did not end after its timeout")
			}
			if !errors.Is(s.err, context.DeadlineExceeded) {
				t.Errorf("context ended with %v, want its deadline", s.err)
			}
			if d := s.deadline.Sub(began); d < timeout || s.ended.Before(s.deadline) {
				t.Errorf("context with a deadline %v after Run began ended %v after it, before the timeout %v", d, s.ended.Sub(began), timeout)
			}
			r := e.next("slow", prev)
			if r.ok || r.state != failing || !strings.Contains(r.reason, "timed out after 30ms") {
				t.Errorf("result ok=%v state=%v reason %q, want a failure timed out after 30ms", r.ok, r.state, r.reason)
			}
			coreMetric(t, "kolla_agent_check_failures_total", e.h.metrics.failures.WithLabelValues("slow"), 1)
		})
	}
}

// TestHealthHungCheck: a check that ignores its context shows "did not
// return" and "still running" failures, never runs twice at once, goes stale
// two periods after its last answer whatever its failure threshold, and its
// late pass does not count.
func TestHealthHungCheck(t *testing.T) {
	const period, timeout = 10 * time.Second, 5 * time.Second
	chk := newCoreCheck(corePass("ok"))
	e := coreNew(t, Config{Checks: []Spec{{
		Name: "api", Probes: []Probe{Readiness, Liveness}, Period: period, Timeout: timeout,
		FailureThreshold: 10, Checker: chk,
	}}})
	prev := e.cur("api")
	e.run()
	if r := e.next("api", prev); r.state != passing {
		t.Fatalf("first look: %v", r.state)
	}

	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	chk.set(coreHang(entered, release))
	e.fc.Step(period) // t=10s: the second look starts and hangs
	<-entered
	expectReady := func(stage string, want bool, reason string) {
		t.Helper()
		rep := e.eval(Readiness)
		if rep.Pass != want || !strings.Contains(rep.Reason, reason) {
			t.Fatalf("%s: readiness %v %q, want %v %q", stage, rep.Pass, rep.Reason, want, reason)
		}
	}
	expectReady("hanging before its timeout", true, "")

	r := e.step("api", timeout+hangGrace) // t=16s
	if r.ok || !strings.Contains(r.reason, "did not return") {
		t.Fatalf("after timeout and grace: ok=%v %q, want did not return", r.ok, r.reason)
	}
	r = e.step("api", period-timeout-hangGrace) // t=20s: the third look is due
	if r.ok || !strings.Contains(r.reason, "still running") {
		t.Fatalf("when the next look is due: ok=%v %q, want still running", r.ok, r.reason)
	}
	if n := chk.looks.Load(); n != 2 {
		t.Errorf("%d looks started, want 2: no look while one runs", n)
	}
	coreMetric(t, "kolla_agent_check_failures_total", e.h.metrics.failures.WithLabelValues("api"), 2)

	// Two periods after its last answer (t=0) the check is stale, though
	// only 2 of its 10 allowed failures have been seen.
	e.fc.Step(time.Second) // t=21s
	expectReady("stale", false, "api: no result for 21s")
	if cr := e.line(Readiness, "api"); cr.State != "fail" || !strings.Contains(cr.Reason, "still running") {
		t.Errorf("stale line %s %q, want fail and the last failure", cr.State, cr.Reason)
	}
	if live := e.eval(Liveness); live.Pass {
		t.Error("liveness passes with a stale liveness check")
	}
	r = e.step("api", period) // t=31s: still running again
	if !strings.Contains(r.reason, "still running") {
		t.Fatalf("reason %q", r.reason)
	}
	expectReady("still hung", false, "api: no result for 31s")

	// The hung look returns at last; the next look starts on the next
	// tick, and a pass makes the check fresh again.
	prev = e.cur("api")
	close(release)
	if r = e.next("api", prev); r.ok || !strings.Contains(r.reason, "gave up late") {
		t.Fatalf("late answer: ok=%v %q", r.ok, r.reason)
	}
	chk.set(corePass("ok"))
	e.step("api", period)
	expectReady("answering again", true, "")
	if n, m := chk.looks.Load(), chk.maxRun.Load(); n != 3 || m != 1 {
		t.Errorf("%d looks, %d at once; want 3, 1", n, m)
	}
}

// TestHealthPendingLiveness: a liveness check with no result yet passes, as
// Kubernetes' liveness starts as success; once stale it fails.
func TestHealthPendingLiveness(t *testing.T) {
	const period, timeout = 10 * time.Second, 5 * time.Second
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) }) // after Run's cleanup: Run gives up on it
	chk := newCoreCheck(coreHang(entered, release))
	e := coreNew(t, Config{Checks: []Spec{{
		Name: "proc", Probes: []Probe{Liveness}, Period: period, Timeout: timeout, FailureThreshold: 5, Checker: chk,
	}}})
	e.run()
	<-entered
	if live := e.eval(Liveness); !live.Pass {
		t.Fatalf("liveness with a pending check fails: %s", live.Reason)
	}
	e.step("proc", timeout+hangGrace)        // t=6s: did not return
	e.step("proc", period-timeout-hangGrace) // t=10s: still running
	e.step("proc", period)                   // t=20s: still running
	if cr := e.line(Liveness, "proc"); cr.State != "pending" {
		t.Fatalf("state %s, want pending (3 of 5 failures)", cr.State)
	}
	if live := e.eval(Liveness); !live.Pass {
		t.Fatalf("liveness fails at two periods: %s", live.Reason)
	}
	e.fc.Step(time.Millisecond)
	if live := e.eval(Liveness); live.Pass || !strings.Contains(live.Reason, "proc: no result for") {
		t.Fatalf("liveness %v %q with a stale pending check, want a failure", live.Pass, live.Reason)
	}
}

// TestHealthReadsOnlyCache: answering costs no look, and answers come while
// a check hangs and before Run.
func TestHealthReadsOnlyCache(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	chk := newCoreCheck(coreHang(entered, release))
	e := coreNew(t, Config{Checks: []Spec{{
		Name: "hung", Probes: []Probe{Startup, Readiness, Liveness}, Period: time.Second, Timeout: time.Second, Checker: chk,
	}}})
	srv, err := NewServer(ServerConfig{Health: e.h, Address: "127.0.0.1:0", Gatherer: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	hd := srv.Handler()
	ask := func() {
		for _, p := range []string{"/livez", "/readyz?verbose", "/startupz?format=json", "/readyz/hung", "/metrics"} {
			if w := coreServe(hd, "GET", p); w.Code != 200 && w.Code != 503 {
				t.Errorf("GET %s: %d", p, w.Code)
			}
		}
	}
	ask() // before Run
	e.run()
	<-entered
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			ask()
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handlers wait for a hung check")
	}
	if n := chk.looks.Load(); n != 1 {
		t.Errorf("%d looks after 1,000 requests, want 1: requests must not look", n)
	}
}

// TestMetricsFollowChecks: the per-check and per-probe metrics follow the
// results the handlers read.
func TestMetricsFollowChecks(t *testing.T) {
	const period = 10 * time.Second
	chk := newCoreCheck(coreFail("refused"))
	e := coreNew(t, Config{Checks: []Spec{{
		Name: "db", Probes: []Probe{Readiness}, Period: period, Timeout: time.Second, FailureThreshold: 2, Checker: chk,
	}}})
	expect := func(stage string, passing, failures float64, probes map[string]float64) {
		t.Helper()
		coreMetric(t, stage+": kolla_agent_check_passing", e.h.metrics.passing.WithLabelValues("db"), passing)
		coreMetric(t, stage+": kolla_agent_check_failures_total", e.h.metrics.failures.WithLabelValues("db"), failures)
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "kolla_agent_probe_passing" {
				continue
			}
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		for p, want := range probes {
			if got[p] != want {
				t.Errorf("%s: kolla_agent_probe_passing{probe=%q} = %v, want %v", stage, p, got[p], want)
			}
		}
	}
	expect("before any look", 0, 0, map[string]float64{"startup": 1, "readiness": 0, "liveness": 1})
	prev := e.cur("db")
	e.run()
	e.next("db", prev)
	expect("one failure", 0, 1, map[string]float64{"readiness": 0})
	chk.set(corePass("ok"))
	e.step("db", period)
	expect("passing", 1, 1, map[string]float64{"readiness": 1, "liveness": 1})
	chk.set(coreFail("refused"))
	e.step("db", period)
	expect("1 of 2 failures", 1, 2, map[string]float64{"readiness": 1})
	e.step("db", period)
	expect("failing", 0, 3, map[string]float64{"readiness": 0, "liveness": 1})
	e.h.SetGate("stopping", "stopping")
	chk.set(corePass("ok"))
	e.step("db", period)
	expect("gated", 1, 3, map[string]float64{"readiness": 0})
	if got := testutil.ToFloat64(e.h.metrics.duration.WithLabelValues("db")); got != 0 {
		t.Errorf("kolla_agent_check_duration_seconds = %v on a fake clock, want 0", got)
	}
}

// coreMetric waits for c's value to be want: the runner publishes a result,
// then its metrics.
func coreMetric(t *testing.T, what string, c prometheus.Collector, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := testutil.ToFloat64(c)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s = %v, want %v", what, got, want)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMetricsLint lints every metric the package registers, with
// promlint, and checks they share the kolla_agent_ prefix.
func TestMetricsLint(t *testing.T) {
	rec := &recordingRegisterer{reg: prometheus.NewPedanticRegistry()}
	chk := newCoreCheck(coreFail("x"))
	fc := clocktesting.NewFakeClock(time.Now())
	h, err := New(Config{Registerer: rec, Clock: fc, Checks: []Spec{{
		Name: "db", Probes: []Probe{Readiness}, Period: time.Second, Timeout: time.Second, Checker: chk,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h.recordAt(h.gen.Load(), h.byName["db"], false, "", errors.New("x"), time.Millisecond, true) // every vector has a child
	mfs, err := rec.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	gathered := map[string]bool{}
	for _, mf := range mfs {
		gathered[mf.GetName()] = true
	}
	described := rec.names(t)
	if len(described) == 0 {
		t.Fatal("no metric registered")
	}
	for _, n := range described {
		if !strings.HasPrefix(n, "kolla_agent_") {
			t.Errorf("metric %s lacks the kolla_agent_ prefix", n)
		}
		if !gathered[n] {
			t.Errorf("metric %s was registered but not gathered, so not linted", n)
		}
	}
	if _, err := New(Config{Registerer: rec.reg}); err == nil {
		t.Error("a second Health on the same registry: no error")
	}
}

// recordingRegisterer registers on reg and keeps what it was given.
type recordingRegisterer struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.reg.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// names are the metric names the registered collectors describe.
func (r *recordingRegisterer) names(t *testing.T) []string {
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range r.collectors {
		c.Describe(ch)
	}
	close(ch)
	var names []string
	for d := range ch {
		m := fqNameRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names = append(names, m[1])
	}
	sort.Strings(names)
	return names
}

// TestHealthRunClosesCheckers: Run returns when its context ends, after
// every look has returned, and closes the checkers that hold something.
func TestHealthRunClosesCheckers(t *testing.T) {
	looking := make(chan struct{})
	chk := newCoreCheck(func(ctx context.Context) (string, error) {
		close(looking)
		<-ctx.Done()
		return "", ctx.Err()
	})
	h, err := New(Config{Checks: []Spec{{
		Name: "conn", Probes: []Probe{Readiness}, Period: time.Hour, Timeout: time.Hour, Checker: chk,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	<-looking
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if chk.running.Load() != 0 {
		t.Error("Run returned before the look did")
	}
	if n := chk.closed.Load(); n != 1 {
		t.Errorf("Close called %d times, want 1", n)
	}
}

// TestHealthAnswersWhileRunStarts: the probe server may answer before and
// while Run starts (the agent starts both in one run group); under -race
// this proves the handlers share no unsynchronised state with Run.
func TestHealthAnswersWhileRunStarts(t *testing.T) {
	chk := newCoreCheck(corePass("ok"))
	// The real clock: a fake one's mutex would order the accesses.
	e := coreNew(t, Config{Clock: realClock(), Checks: []Spec{{
		Name: "db", Probes: []Probe{Startup, Readiness, Liveness}, Period: time.Second, Timeout: time.Second, Checker: chk,
	}}})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, p := range []Probe{Startup, Readiness, Liveness} {
				e.h.Evaluate(p, nil, "")
			}
			e.h.Evaluate(Readiness, nil, "db")
		}
	}()
	prev := e.cur("db")
	e.run()
	e.next("db", prev)
	corePoll(t, "readiness", func() bool { return e.eval(Readiness).Pass })
	close(stop)
	<-done
}
