package probes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Probe is one of the kubelet's three probes.
type Probe int

const (
	Startup Probe = iota
	Readiness
	Liveness
)

func (p Probe) String() string {
	switch p {
	case Startup:
		return "startup"
	case Readiness:
		return "readiness"
	case Liveness:
		return "liveness"
	}
	return fmt.Sprintf("probe(%d)", int(p))
}

// ParseProbe reads "startup", "readiness" or "liveness".
func ParseProbe(s string) (Probe, error) {
	for _, p := range []Probe{Startup, Readiness, Liveness} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown probe %q (want startup, readiness or liveness)", s)
}

// Spec is one check and how it is scheduled and judged.
type Spec struct {
	Name    string
	Probes  []Probe
	Period  time.Duration
	Timeout time.Duration
	// FailureThreshold consecutive failures turn a passing check to failed;
	// SuccessThreshold consecutive passes turn it back (Kubernetes' meanings).
	FailureThreshold, SuccessThreshold int
	Checker                            Checker
}

// AgentCheck is the name of the built-in liveness check of the agent's own
// loop; ProcessCheck that of the service process when the agent adds it.
const AgentCheck = "agent"

// Config is what Health checks and with which means.
type Config struct {
	Checks []Spec
	// DrainFile: while it exists, readiness fails with "draining". Looked at
	// by the agent's own loop, never in a request.
	DrainFile string
	// Tick is the period of the agent's own loop (drain file, liveness of the
	// loop itself); default 1s.
	Tick       time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: no metrics
	Clock      clock.WithTicker      // nil: the real clock
}

// Health runs the checks and keeps their results for the probe handlers.
type Health struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.WithTicker
	checks  []*checkState
	byName  map[string]*checkState
	metrics *metrics

	start   atomic.Pointer[time.Time] // Run's start: set by Run, read by the handlers
	started atomic.Bool               // startup has passed (latched)
	// gen counts the service's processes (Restarted): a look begun at an
	// older one is not recorded.
	gen atomic.Int64
	// testRecording, when set, is called by recordAt between the
	// generation test and the record of a look that passed (ok) or not
	// (tests: a restart in that window).
	testRecording func(ok bool)
	draining      atomic.Bool  // the drain file exists
	beat          atomic.Int64 // unix nanos of the agent loop's last tick

	mu    sync.Mutex
	gates map[string]string // readiness gates: name -> reason
	notes map[string]string // degraded duties: name -> reason (verbose only)
	// gatesSnap is gates+notes copied for lock-free reads by the handlers.
	gatesSnap atomic.Pointer[gateSnapshot]
}

type gateSnapshot struct {
	gates []gate // sorted by name
	notes []gate
}

type gate struct{ name, reason string }

// New validates cfg.
func New(cfg Config) (*Health, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	h := &Health{
		cfg:    cfg,
		log:    cfg.Logger,
		clock:  cfg.Clock,
		byName: map[string]*checkState{},
		gates:  map[string]string{},
		notes:  map[string]string{},
	}
	for i, s := range cfg.Checks {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("probes: check %d has no name", i)
		case s.Name == AgentCheck:
			return nil, fmt.Errorf("probes: check name %q is reserved", s.Name)
		case h.byName[s.Name] != nil:
			return nil, fmt.Errorf("probes: check %q given twice", s.Name)
		case s.Checker == nil:
			return nil, fmt.Errorf("probes: check %q has no checker", s.Name)
		case s.Period <= 0:
			return nil, fmt.Errorf("probes: check %q: period must be above 0", s.Name)
		case s.Timeout <= 0 || s.Timeout > s.Period:
			return nil, fmt.Errorf("probes: check %q: timeout %v must be above 0 and at most the period %v", s.Name, s.Timeout, s.Period)
		case len(s.Probes) == 0:
			return nil, fmt.Errorf("probes: check %q counts for no probe", s.Name)
		}
		if s.FailureThreshold <= 0 {
			s.FailureThreshold = 3
		}
		if s.SuccessThreshold <= 0 {
			s.SuccessThreshold = 1
		}
		c := &checkState{spec: s, kick: make(chan struct{}, 1)}
		for _, p := range s.Probes {
			if p < Startup || p > Liveness {
				return nil, fmt.Errorf("probes: check %q: unknown %v", s.Name, p)
			}
			c.probes[p] = true
		}
		c.cur.Store(&result{state: pending, reason: "no result yet"})
		h.checks = append(h.checks, c)
		h.byName[s.Name] = c
	}
	m, err := newMetrics(cfg.Registerer, h)
	if err != nil {
		return nil, err
	}
	h.metrics = m
	now := h.clock.Now()
	h.start.Store(&now)
	h.beat.Store(now.UnixNano())
	h.publishGates()
	if !h.hasProbe(Startup) {
		h.started.Store(true)
	}
	return h, nil
}

func (h *Health) hasProbe(p Probe) bool {
	for _, c := range h.checks {
		if c.probes[p] {
			return true
		}
	}
	return false
}

// Run runs every check and the agent's own loop until ctx ends, then closes
// the checkers that hold something. It returns nil when ctx ended.
func (h *Health) Run(ctx context.Context) error {
	now := h.clock.Now()
	h.start.Store(&now)
	var wg sync.WaitGroup
	for _, c := range h.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.runCheck(ctx, c)
		}()
	}
	h.loop(ctx)
	wg.Wait()
	var errs []error
	for _, c := range h.checks {
		if cl, ok := c.spec.Checker.(Closer); ok {
			if err := cl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("check %s: close: %w", c.spec.Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		h.log.Warn("closing checks", "error", err.Error())
	}
	return nil
}

// loop is the agent's own heartbeat: it proves to liveness that the agent is
// scheduling work, and looks at the drain file.
func (h *Health) loop(ctx context.Context) {
	t := h.clock.NewTicker(h.cfg.Tick)
	defer t.Stop()
	for {
		h.beat.Store(h.clock.Now().UnixNano())
		if h.cfg.DrainFile != "" {
			_, err := os.Stat(h.cfg.DrainFile)
			if d := err == nil; h.draining.Swap(d) != d {
				if d {
					h.log.Info("drain file present: readiness fails until it is removed", "path", h.cfg.DrainFile)
				} else {
					h.log.Info("drain file removed", "path", h.cfg.DrainFile)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// SetGate makes readiness fail with reason until ClearGate(name): the agent
// sets "stopping", "bootstrap", "reload".
func (h *Health) SetGate(name, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.gates[name]; ok && r == reason {
		return
	}
	h.gates[name] = reason
	h.publishGatesLocked()
}

// ClearGate removes a gate set by SetGate.
func (h *Health) ClearGate(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.gates[name]; !ok {
		return
	}
	delete(h.gates, name)
	h.publishGatesLocked()
}

// SetDegraded records that a side duty of the agent is failing; it shows in
// verbose output only and fails no probe. An empty reason clears it.
func (h *Health) SetDegraded(duty, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reason == "" {
		delete(h.notes, duty)
	} else {
		h.notes[duty] = reason
	}
	h.publishGatesLocked()
}

func (h *Health) publishGates() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishGatesLocked()
}

func (h *Health) publishGatesLocked() {
	s := &gateSnapshot{}
	for n, r := range h.gates {
		s.gates = append(s.gates, gate{n, r})
	}
	for n, r := range h.notes {
		s.notes = append(s.notes, gate{n, r})
	}
	sort.Slice(s.gates, func(i, j int) bool { return s.gates[i].name < s.gates[j].name })
	sort.Slice(s.notes, func(i, j int) bool { return s.notes[i].name < s.notes[j].name })
	h.gatesSnap.Store(s)
}

// Verify waits until every readiness check has passed a look that began
// at or after since, as many times in a row as its successThreshold: the
// service answers well after a change made at since (a reload). Each check
// is asked to look at once rather than at its next period. When ctx ends
// first, the error names each check that has not, and why. With no
// readiness check there is nothing to wait for.
func (h *Health) Verify(ctx context.Context, since time.Time) error {
	var checks []*checkState
	for _, c := range h.checks {
		if c.probes[Readiness] {
			checks = append(checks, c)
			select {
			case c.kick <- struct{}{}:
			default:
			}
		}
	}
	t := h.clock.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var waiting []string
		for _, c := range checks {
			r := c.cur.Load()
			switch begun := r.at.Add(-r.took); {
			case r.at.IsZero() || begun.Before(since):
				waiting = append(waiting, c.spec.Name+": no look since the change yet")
			case !r.ok:
				waiting = append(waiting, c.spec.Name+": "+r.reason)
			case r.streak < c.spec.SuccessThreshold || r.answered != r.at:
				waiting = append(waiting, fmt.Sprintf("%s: %d of %d passes", c.spec.Name, r.streak, c.spec.SuccessThreshold))
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %s", strings.Join(waiting, "; "))
		case <-t.C():
		}
	}
}

// Started reports whether startup has passed.
func (h *Health) Started() bool { return h.started.Load() }

// Restarted is told that the service's process went or was replaced by
// another (sidecar mode: its container restarted): every result so far
// was the old process's. Startup is to pass again, every check is pending
// (readiness fails, liveness passes) and looks now, and a look of the old
// process that returns later is not recorded. Without it the new
// container's startup probe passed at once and its readiness on the old
// process's last pass, while kolla_start was still at its sudo steps.
func (h *Health) Restarted() {
	// Every check's lock is held across the change: a look that passed the
	// generation test just before it would otherwise record, and latch
	// startup again on the old results, after the latch was cleared.
	for _, c := range h.checks {
		c.mu.Lock()
	}
	h.gen.Add(1)
	h.started.Store(!h.hasProbe(Startup))
	now := h.clock.Now() // staleness counts from the change
	for _, c := range h.checks {
		r := &result{state: pending, reason: "the service's process changed: no look at the new one yet", answered: now}
		c.cur.Store(r)
		h.metrics.reset(c.spec.Name)
	}
	for _, c := range h.checks {
		c.mu.Unlock()
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	h.log.Info("the service's process changed: startup and the checks start over")
}
