package probes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kolla-agent/kolla-agent/redact"
)

// state is a check's judged state, after thresholds.
type state int

const (
	pending state = iota // not judged yet: fails readiness, passes liveness
	passing
	failing
)

func (s state) String() string {
	switch s {
	case passing:
		return "pass"
	case failing:
		return "fail"
	}
	return "pending"
}

// result is what the handlers read: one immutable value per look, swapped in
// atomically.
type result struct {
	state state
	// ok and reason are the last look's own outcome (before thresholds).
	ok     bool
	reason string // the error, or the detail of a pass
	at     time.Time
	took   time.Duration
	// answered is when the checker last returned. The failures the runner
	// records for a look that has not returned ("still running", "did not
	// return") count toward the threshold but keep it: staleness is
	// measured from it, so a hung check goes stale.
	answered time.Time
	// streak counts consecutive looks with the same outcome.
	streak int
	// passedOnce: the check has been judged passing at least once.
	passedOnce bool
}

type checkState struct {
	spec   Spec
	probes [3]bool
	cur    atomic.Pointer[result]
	kick   chan struct{} // a look now, not at the next period (Verify, Restarted)
	// mu orders a look's record with Restarted's reset: a look of the old
	// process is recorded before the reset or not at all.
	mu sync.Mutex
}

// hangGrace is how long past its timeout a check may take to return after
// its context is cancelled before it is reported as hung.
const hangGrace = time.Second

// runCheck looks every period, one look at a time: a look still running when
// the next is due is a failure ("still running"), never a second concurrent
// look and never a stale pass (health-probe.py's flaw).
func (h *Health) runCheck(ctx context.Context, c *checkState) {
	type done struct {
		detail string
		err    error
		took   time.Duration
		gen    int64 // the service's process the look began at
	}
	var inflight chan done
	var started time.Time
	var startedGen int64 // the service's process the look in flight began at
	var hungC <-chan time.Time
	start := func() {
		inflight = make(chan done, 1)
		started, startedGen = h.clock.Now(), h.gen.Load()
		// The timer exists before the look does (a fake clock's step
		// right after the look began must reach it).
		hungC = h.clock.NewTimer(c.spec.Timeout + hangGrace).C()
		ch, gen := inflight, startedGen
		go func() {
			cctx, cancel := context.WithTimeout(ctx, c.spec.Timeout)
			defer cancel()
			t0 := h.clock.Now()
			detail, err := c.spec.Checker.Check(cctx)
			if err == nil && cctx.Err() != nil && ctx.Err() == nil {
				err = cctx.Err() // a pass that came after the deadline is not a pass
			}
			if err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("timed out after %v: %w", c.spec.Timeout, err)
			}
			ch <- done{detail, err, h.clock.Since(t0), gen}
		}()
	}
	t := h.clock.NewTicker(c.spec.Period)
	defer t.Stop()
	start()
	for {
		select {
		case <-ctx.Done():
			if inflight != nil {
				// The look's context is a child of ctx: it ends soon.
				select {
				case <-inflight:
				case <-h.clock.After(c.spec.Timeout + hangGrace):
					h.log.Warn("check did not return after cancellation", "check", c.spec.Name)
				}
			}
			return
		case d := <-inflight:
			inflight, hungC = nil, nil
			if !h.recordAt(d.gen, c, d.err == nil, d.detail, d.err, d.took, true) {
				start() // the process changed during the look: the new one's, now
			}
		case <-hungC:
			hungC = nil
			// A look of the old process that hangs is not the new one's failure.
			h.recordAt(startedGen, c, false, "", fmt.Errorf("did not return %v after its timeout of %v", hangGrace, c.spec.Timeout), h.clock.Since(started), false)
		case <-c.kick:
			if inflight == nil {
				start()
			}
		case <-t.C():
			if inflight != nil {
				h.recordAt(startedGen, c, false, "", fmt.Errorf("previous look still running after %v", h.clock.Since(started).Round(time.Millisecond)), h.clock.Since(started), false)
				continue
			}
			start()
		}
	}
}

// recordAt records a look begun at the service's process gen (or the
// runner's own failure of one: still running, hung), and reports whether
// it did: not when the process changed since.
func (h *Health) recordAt(gen int64, c *checkState, ok bool, detail string, err error, took time.Duration, answered bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != h.gen.Load() {
		return false
	}
	if h.testRecording != nil {
		h.testRecording(ok)
	}
	h.judge(c, ok, detail, err, took, answered)
	return true
}

// judge judges one look with the check's thresholds and publishes it;
// answered is false for a failure the runner records for a look that has
// not returned. c.mu is held.
func (h *Health) judge(c *checkState, ok bool, detail string, err error, took time.Duration, answered bool) {
	prev := c.cur.Load()
	r := &result{state: prev.state, ok: ok, at: h.clock.Now(), took: took, passedOnce: prev.passedOnce, answered: prev.answered}
	if answered {
		r.answered = r.at
	}
	// Reasons are shown by probe answers, Events and the log: no URL's
	// password, no NAME=secret, and no exec output (the log has it).
	var output string
	if ok {
		r.reason = redact.Text(detail)
	} else {
		r.reason = redact.Text(err.Error())
		if ee := (*ExecError)(nil); errors.As(err, &ee) {
			output = ee.Output
		}
	}
	r.streak = 1
	if prev.ok == ok && !prev.at.IsZero() {
		r.streak = prev.streak + 1
	}
	switch {
	case ok && r.streak >= c.spec.SuccessThreshold:
		r.state = passing
	case !ok && r.streak >= c.spec.FailureThreshold:
		r.state = failing
	}
	r.passedOnce = r.passedOnce || r.state == passing
	c.cur.Store(r)
	h.metrics.observe(c.spec.Name, r)
	if r.state != prev.state {
		attrs := []any{"check", c.spec.Name, "state", r.state.String(), "reason", r.reason, "took", took.Round(time.Microsecond).String()}
		if output != "" {
			attrs = append(attrs, "output", output)
		}
		if r.state == failing {
			h.log.Warn("check failing", attrs...)
		} else {
			h.log.Info("check state changed", attrs...)
		}
	} else if output != "" {
		h.log.Debug("check output", "check", c.spec.Name, "reason", r.reason, "output", output)
	}
	if r.state == passing && !h.started.Load() {
		h.checkStarted()
	}
}

// checkStarted latches startup once every startup check has passed once.
func (h *Health) checkStarted() {
	for _, c := range h.checks {
		if c.probes[Startup] && !c.cur.Load().passedOnce {
			return
		}
	}
	if !h.started.Swap(true) {
		h.log.Info("startup probe passed", "after", h.clock.Since(*h.start.Load()).Round(time.Millisecond).String())
	}
}
