package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Loop is how Forever starts a loop again.
type Loop struct {
	// Schedule is the waits' bound (Restart(), ...); its own ±20 % jitter
	// is replaced by full jitter.
	Schedule wait.Backoff
	// Clock is what the waits and the run's length are measured on; nil:
	// the real one.
	Clock clock.Clock
	// Failed, when set, hears each return of the loop while ctx lasts (a
	// nil error: it stopped by itself) and the wait before the next start.
	Failed func(err error, wait time.Duration)
	// Retrying, when set, is called once that wait is over.
	Retrying func()
}

// Forever runs fn until ctx ends, and starts it again each time it returns
// before that: after a wait drawn with full jitter (uniform between zero
// and the schedule's step), so that the replicas of a Deployment that
// failed together do not come back together. A run that lasted longer than
// the schedule's cap worked for a while: its failure starts the schedule
// over.
func Forever(ctx context.Context, l Loop, fn func(context.Context) error) {
	clk := l.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	fresh := l.Schedule
	fresh.Jitter = 0
	b := fresh
	for {
		start := clk.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			return
		}
		if clk.Since(start) > fresh.Cap {
			b = fresh
		}
		d := FullJitter(b.Step())
		if l.Failed != nil {
			l.Failed(err, d)
		}
		if !Sleep(ctx, clk, d) {
			return
		}
		if l.Retrying != nil {
			l.Retrying()
		}
	}
}

// FullJitter is a wait drawn uniformly between 0 and d.
func FullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}
