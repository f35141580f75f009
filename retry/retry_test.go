package retry

import (
	"context"
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
