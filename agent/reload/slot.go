package reload

import (
	"context"
	"fmt"
	"log/slog"
)

// Slots are the Leases <Lease>-0 .. <Lease>-(N-1): at most N replicas act
// on their service at once (reload.maxUnavailable).
type Slots struct {
	Lease string
	N     int
}

// TakeFunc acquires the named Lease and holds it, renewed, until release
// is called; it returns an error when ctx ends first.
type TakeFunc func(ctx context.Context, name string) (release func(), err error)

// HoldSlot takes whichever of the slots comes free first and holds it until
// the returned release is called. The other tries stop once one is won; two
// won at once keep one.
func HoldSlot(ctx context.Context, take TakeFunc, s Slots, log *slog.Logger) (func(), error) {
	type won struct {
		i       int
		slot    string
		release func()
		err     error
	}
	results := make(chan won, s.N)
	cancels := make([]context.CancelFunc, s.N)
	for i := range s.N {
		lctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		name := fmt.Sprintf("%s-%d", s.Lease, i)
		go func() {
			release, err := take(lctx, name)
			results <- won{i, name, release, err}
		}()
	}
	log.Info("reload: waiting for a turn", "leases", fmt.Sprintf("%s-0..%d", s.Lease, s.N-1))
	var got *won
	for range s.N {
		r := <-results
		switch {
		case r.err != nil:
		case got == nil:
			got = &r
			for i, c := range cancels {
				if i != r.i {
					c() // the others stop; the winner's Lease is renewed until release
				}
			}
		default:
			r.release() // two came free at once: keep one
		}
	}
	if got == nil {
		for _, c := range cancels {
			c()
		}
		return nil, fmt.Errorf("no reload Lease acquired: %w", context.Cause(ctx))
	}
	log.Info("reload: holding a turn", "lease", got.slot)
	return func() {
		// Done acting: said before the Lease goes, as the next replica
		// may take it, and say so, before the release returns.
		log.Info("reload: turn done", "lease", got.slot)
		got.release()
		cancels[got.i]()
		log.Info("reload: turn released", "lease", got.slot)
	}, nil
}
