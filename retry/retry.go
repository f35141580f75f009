// Package retry is the agent's one set of back-off schedules and the wait
// between two tries, for every loop that looks again: a dependency, a DNS
// name in a template, a Lease, a bootstrap step, a check's watch, a duty
// that failed. Each schedule doubles from its first wait to its cap, with
// ±20 % jitter so a fleet of pods does not look in step, and never runs out
// of steps: how long to keep trying is the caller's context. Forever
// restarts a loop that must not end (a side duty, a check's watch) with
// full jitter.
package retry

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Schedule doubles from first to max, with jitter, without end.
func Schedule(first, max time.Duration) wait.Backoff {
	return wait.Backoff{Duration: first, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: max}
}

// Lookup is for what answers in milliseconds once it can: a dependency, a
// DNS name, an API write. The first retry is fast (a service that comes up
// right after us costs little): 50 ms to 2 s.
func Lookup() wait.Backoff { return Schedule(50*time.Millisecond, 2*time.Second) }

// Step is for a bootstrap step's API calls: 100 ms to 5 s.
func Step() wait.Backoff { return Schedule(100*time.Millisecond, 5*time.Second) }

// Restart is for starting again what failed or ended on its own (a duty,
// a check's watch, the broker connection): 500 ms to 30 s.
func Restart() wait.Backoff { return Schedule(500*time.Millisecond, 30*time.Second) }

// Sleep waits d on clk (nil: the real clock); false if ctx ended first.
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
