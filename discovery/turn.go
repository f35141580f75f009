package discovery

import (
	"context"
	"slices"
	"sync"
)

// A wait holds one WATCH at a time. Every lookup LISTs at once, so a pod
// whose dependencies are met makes those LISTs and nothing else; of the
// lookups the LISTs leave unmet, one WATCHes and the others wait until the
// one before them is met and its watch closes, then LIST again (what they
// listed is as old as their wait) and WATCH from there if still unmet.
// Every dependency is met in the end either way; what changes is that the
// API server keeps one watcher per waiting pod, not one per resource kind,
// and a watcher's memory is what grows with a fleet of waiting pods
// (docs/scale.md).
//
// Jobs go last: the Jobs a pod waits for (db_sync, bootstrap) need the
// Services it waits for (the database) and complete after them, so the
// kind met last is the one being watched when it is met, and the pod goes
// on at its event, with no LIST after it. A lookup of another kind asking
// for the turn takes it from a Job lookup, whose watch closes until the
// turn comes back. A lookup waiting for its turn sees no change: a Job
// that fails while a Service is still waited for is seen, and ends the
// wait, once the Service is met. Follow (a probe) and what a lookup
// watches beside its own objects (an exposure's Ingress or nodes) take no
// turn.
//
// At the start, Job lookups wait until every lookup of the other kinds
// (counted when the wait starts: an arrival each) has asked for the turn
// or ended, so that a pod whose Services are unmet opens no Jobs watch
// that a Service lookup closes a moment later.
type watchTurn struct {
	mu      sync.Mutex
	holder  *ticket
	waiting []*ticket
	early   int // arrivals not yet made
}

// ticket is one lookup's claim on the turn.
type ticket struct {
	first   bool          // not a Job lookup: served before Job lookups
	granted chan struct{} // closed when the turn is this ticket's
	yield   func()        // ends the holder's watch for a first ticket
}

// arrival is a lookup the Job lookups wait for at the start; made when it
// first asks for the turn or ends, whichever comes first.
type arrival struct{ made bool }

type turnKey struct{}

// withTurn gives the lookups of one wait a turn to share.
func withTurn(ctx context.Context) (context.Context, *watchTurn) {
	t := &watchTurn{}
	return context.WithValue(ctx, turnKey{}, t), t
}

// expect returns an arrival the Job lookups wait for; nil outside a wait.
// All of them are expected before the wait's lookups start.
func (t *watchTurn) expect() *arrival {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.early++
	return &arrival{}
}

// arrived makes a's arrival (at most once; nil: none expected).
func (t *watchTurn) arrived(a *arrival) {
	if t == nil || a == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.arriveLocked(a)
	if t.early == 0 && t.holder == nil {
		t.handOn()
	}
}

func (t *watchTurn) arriveLocked(a *arrival) {
	if a != nil && !a.made {
		a.made = true
		t.early--
	}
}

type arrivalKey struct{}

// withArrival carries a lookup's arrival to the watchSet that makes it.
func withArrival(ctx context.Context, a *arrival) context.Context {
	if a == nil {
		return ctx
	}
	return context.WithValue(ctx, arrivalKey{}, a)
}

func arrivalOf(ctx context.Context) *arrival {
	a, _ := ctx.Value(arrivalKey{}).(*arrival)
	return a
}

// turnOf is ctx's wait's turn; nil (no turn to take) outside a wait.
func turnOf(ctx context.Context) *watchTurn {
	t, _ := ctx.Value(turnKey{}).(*watchTurn)
	return t
}

// take waits for the turn and returns the ticket to give it back with, and
// whether it had to wait; nil if ctx ended first. A nil turn is always
// granted at once (a nil ticket's give is a no-op). yield, while the ticket
// holds the turn, ends its watch: the lookup then gives the turn back and
// asks again. park, if not nil, is called once the ticket must wait.
//
// Asking is a's arrival too, made in the same step so that the turn
// cannot go to a Job lookup in between.
func (t *watchTurn) take(ctx context.Context, first bool, a *arrival, yield, park func()) (tk *ticket, waited, ok bool) {
	if t == nil {
		return nil, false, true
	}
	tk = &ticket{first: first, granted: make(chan struct{}), yield: yield}
	t.mu.Lock()
	t.arriveLocked(a)
	if t.holder == nil && (first || t.early == 0) {
		t.holder = tk
		t.mu.Unlock()
		return tk, false, true
	}
	t.waiting = append(t.waiting, tk)
	if first && t.holder != nil && !t.holder.first {
		t.holder.yield()
	}
	t.mu.Unlock()
	if park != nil {
		park()
	}
	select {
	case <-tk.granted:
		return tk, true, true
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		if i := slices.Index(t.waiting, tk); i >= 0 {
			t.waiting = slices.Delete(t.waiting, i, i+1)
			return nil, true, false
		}
		// Granted as ctx ended: hand it on.
		t.giveLocked(tk)
		return nil, true, false
	}
}

// give hands the turn on (handOn).
func (t *watchTurn) give(tk *ticket) {
	if t == nil || tk == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.giveLocked(tk)
}

func (t *watchTurn) giveLocked(tk *ticket) {
	if t.holder != tk {
		return
	}
	t.holder = nil
	t.handOn()
}

// handOn gives the free turn to the lookup of another kind than Jobs that
// has waited longest, else, once every arrival is made, to the Job lookup
// that has.
func (t *watchTurn) handOn() {
	i := slices.IndexFunc(t.waiting, func(w *ticket) bool { return w.first })
	if i < 0 && t.early == 0 && len(t.waiting) > 0 {
		i = 0
	}
	if i < 0 {
		return
	}
	t.holder = t.waiting[i]
	t.waiting = slices.Delete(t.waiting, i, i+1)
	close(t.holder.granted)
}
