package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Each schedule starts at its first wait (within the jitter), doubles, stops
// at its cap and does not run out.
func TestSchedules(t *testing.T) {
	for _, tc := range []struct {
		name       string
		make       func() (s stepper)
		first, cap time.Duration
	}{
		{"Lookup", func() stepper { b := Lookup(); return &b }, 50 * time.Millisecond, 2 * time.Second},
		{"Step", func() stepper { b := Step(); return &b }, 100 * time.Millisecond, 5 * time.Second},
		{"Restart", func() stepper { b := Restart(); return &b }, 500 * time.Millisecond, 30 * time.Second},
	} {
		s := tc.make()
		if d := s.Step(); d < tc.first || d > tc.first*12/10 {
			t.Errorf("%s: first wait %v, want %v +20%%", tc.name, d, tc.first)
		}
		var d time.Duration
		for range 1000 {
			d = s.Step()
		}
		if d < tc.cap || d > tc.cap*12/10 {
			t.Errorf("%s: after 1000 steps %v, want the cap %v +20%%", tc.name, d, tc.cap)
		}
	}
}

type stepper interface{ Step() time.Duration }

// Sleep returns true once the clock passes d, false as soon as ctx ends.
func TestSleep(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	done := make(chan bool)
	go func() { done <- Sleep(context.Background(), clk, time.Minute) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	if !<-done {
		t.Error("Sleep returned false after its time")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(ctx, clk, time.Minute) }()
	cancel()
	if <-done {
		t.Error("Sleep returned true after ctx ended")
	}
}

// Forever starts a loop that returns again after a wait no longer than the
// schedule's step, tells each failure, and starts the schedule over after
// a run that lasted longer than its cap. A fake clock: nothing sleeps.
func TestForever(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type failure struct {
		err  error
		wait time.Duration
	}
	failures := make(chan failure, 1)
	runs := make(chan struct{})
	retrying := 0
	done := make(chan struct{})
	l := Loop{Schedule: Schedule(time.Second, 8*time.Second), Clock: clk,
		Failed:   func(err error, d time.Duration) { failures <- failure{err, d} },
		Retrying: func() { retrying++ }}
	run := 0
	go func() {
		defer close(done)
		Forever(ctx, l, func(ctx context.Context) error {
			run++
			runs <- struct{}{}
			if run == 4 {
				clk.Step(9 * time.Second) // this run lasts longer than the cap
			}
			if run == 6 {
				<-ctx.Done()
				return ctx.Err()
			}
			if run == 2 {
				return nil // stopped by itself: a failure too
			}
			return errors.New("boom")
		})
	}()
	bounds := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, time.Second, 2 * time.Second}
	for i, bound := range bounds {
		<-runs
		f := <-failures
		if (i == 1) != (f.err == nil) {
			t.Errorf("run %d: error %v", i+1, f.err)
		}
		if f.wait < 0 || f.wait > bound {
			t.Errorf("run %d: wait %v, want between 0 and %v", i+1, f.wait, bound)
		}
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(f.wait)
	}
	<-runs
	cancel()
	<-done
	if retrying != len(bounds) {
		t.Errorf("Retrying called %d times, want %d", retrying, len(bounds))
	}
	select {
	case f := <-failures:
		t.Errorf("a failure told after ctx ended: %v", f.err)
	default:
	}
}

// FullJitter spreads waits over the whole of [0, d].
func TestFullJitter(t *testing.T) {
	var low, high bool
	for range 1000 {
		w := FullJitter(time.Second)
		if w < 0 || w > time.Second {
			t.Fatalf("%v outside [0, 1s]", w)
		}
		low = low || w < 100*time.Millisecond
		high = high || w > 900*time.Millisecond
	}
	if !low || !high {
		t.Errorf("1000 waits missed an end of [0, 1s]: below 100ms %v, above 900ms %v", low, high)
	}
	if FullJitter(0) != 0 {
		t.Error("a zero wait jittered")
	}
}
