package reload

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// HoldSlot keeps the first slot that comes free, stops trying the others,
// gives back a second one won at the same time, and fails when ctx ends
// with none won.
func TestHoldSlot(t *testing.T) {
	var mu sync.Mutex
	held := map[string]bool{}
	free := map[string]chan struct{}{"r-0": make(chan struct{}), "r-1": make(chan struct{}), "r-2": make(chan struct{}), "x-0": make(chan struct{})}
	take := func(ctx context.Context, name string) (func(), error) {
		select {
		case <-free[name]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		held[name] = true
		mu.Unlock()
		return func() { mu.Lock(); delete(held, name); mu.Unlock() }, nil
	}
	close(free["r-1"])
	release, err := HoldSlot(context.Background(), take, Slots{Lease: "r", N: 3}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(held) != 1 || !held["r-1"] {
		t.Errorf("held %v, want r-1 alone", held)
	}
	mu.Unlock()
	release()
	if len(held) != 0 {
		t.Errorf("still held after release: %v", held)
	}

	// Two free at once: one is kept, the other given back.
	close(free["r-0"])
	release, err = HoldSlot(context.Background(), take, Slots{Lease: "r", N: 2}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(held) != 1 {
		t.Errorf("held %v, want one", held)
	}
	mu.Unlock()
	release()

	// None free: ctx's end is the error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := HoldSlot(ctx, take, Slots{Lease: "x", N: 1}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a slot held with none free")
	}
}
