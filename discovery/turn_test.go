package discovery

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// A wait's lookups LIST at once and WATCH one at a time: the second lists
// again once the first is met and its watch closed, and watches only if
// that LIST leaves it unmet.
func TestOneWatchAtATime(t *testing.T) {
	for _, metMeanwhile := range []bool{false, true} {
		t.Run(map[bool]string{false: "unmet", true: "met meanwhile"}[metMeanwhile], func(t *testing.T) {
			oneWatchAtATime(t, metMeanwhile)
		})
	}
}

func oneWatchAtATime(t *testing.T, metMeanwhile bool) {
	ctx, cancel := context.WithCancel(withTurnCtx(context.Background()))
	t.Cleanup(cancel)
	sleep := func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil }
	ls := map[string]*sliceLister{"a": newSliceLister(serviceSlice("a", "5", false)), "b": newSliceLister(serviceSlice("b", "5", false))}
	done := map[string]chan error{}
	for name, l := range ls {
		res := make(chan error, 1)
		done[name] = res
		go func() {
			lw := newListWatch(l, selector{label: serviceNameLabel + "=" + name}, func(string, error) {})
			lw.waiting = l.parked
			res <- watchSet(ctx, lw, turnOf(ctx), sleep, func(objs []any) (bool, error) {
				return slicesObservation(objs).State == Ready, nil
			})
		}()
	}
	var first, second string
	var fw *watch.FakeWatcher
	select {
	case fw = <-ls["a"].watches:
		first, second = "a", "b"
	case fw = <-ls["b"].watches:
		first, second = "b", "a"
	case <-time.After(10 * time.Second):
		t.Fatal("no WATCH")
	}
	// Waiting for the turn, it is told so (the wait's "waiting for the
	// turn" state); the holder, which took the turn at once, is not. A
	// lookup that watched without the turn would not park; its WATCH
	// would also break the exact request sequences checked below.
	eventually(t, second+" parked", func() bool {
		ls[second].mu.Lock()
		defer ls[second].mu.Unlock()
		return ls[second].parks > 0
	})
	if got := ls[second].requests(); strings.Contains(got, "WATCH") {
		t.Fatalf("%s watches while %s does: %s", second, first, got)
	}
	ls[first].mu.Lock()
	if ls[first].parks != 0 {
		t.Errorf("%s parked %d times while holding the turn", first, ls[first].parks)
	}
	ls[first].mu.Unlock()
	if metMeanwhile {
		ls[second].mu.Lock()
		ls[second].items = []unstructured.Unstructured{serviceSlice(second, "6", true)}
		ls[second].mu.Unlock()
	}
	ready := serviceSlice(first, "6", true)
	fw.Modify(&ready)
	if err := <-done[first]; err != nil {
		t.Fatal(err)
	}
	list := "LIST " + serviceNameLabel + "=" + second
	if metMeanwhile {
		if err := <-done[second]; err != nil {
			t.Fatal(err)
		}
		if got, want := ls[second].requests(), list+"; "+list; got != want {
			t.Errorf("%s's requests: %s, want %s", second, got, want)
		}
	} else {
		var sw *watch.FakeWatcher
		select {
		case sw = <-ls[second].watches:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never watched after %s was met: %s", second, first, ls[second].requests())
		}
		if got, want := ls[second].requests(), list+"; "+list+"; WATCH "+serviceNameLabel+"="+second+" from 10"; got != want {
			t.Errorf("%s's requests: %s, want %s", second, got, want)
		}
		ready = serviceSlice(second, "7", true)
		sw.Modify(&ready)
		if err := <-done[second]; err != nil {
			t.Fatal(err)
		}
	}
	if tr := turnOf(ctx); tr.holder != nil || len(tr.waiting) != 0 {
		t.Error("the turn is still held after both lookups ended")
	}
}

// A lookup whose WATCH is refused polls, and polls hold no watcher: it
// gives the turn to the next lookup, which watches meanwhile.
func TestRefusedWatchGivesTheTurn(t *testing.T) {
	ctx, cancel := context.WithCancel(withTurnCtx(context.Background()))
	t.Cleanup(cancel)
	refused := &refusingLister{refusals: 1 << 30}
	polling := make(chan struct{})
	polls := 0
	sleep := func(ctx context.Context, d time.Duration) bool {
		if polls++; polls == 2 {
			close(polling)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
			return true
		}
	}
	go watchSet(ctx, newListWatch(refused, selector{label: "a=b"}, func(string, error) {}), turnOf(ctx), sleep, func(objs []any) (bool, error) { return false, nil })
	<-polling // refused, and polling
	other := newSliceLister(serviceSlice("b", "5", false))
	res := make(chan error, 1)
	go func() {
		lw := newListWatch(other, selector{label: serviceNameLabel + "=b"}, func(string, error) {})
		res <- watchSet(ctx, lw, turnOf(ctx), func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil }, func(objs []any) (bool, error) {
			return slicesObservation(objs).State == Ready, nil
		})
	}()
	select {
	case w := <-other.watches:
		ready := serviceSlice("b", "6", true)
		w.Modify(&ready)
	case <-time.After(10 * time.Second):
		t.Fatalf("the other lookup never watched while the refused one polled: %s", other.requests())
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// A lookup of another kind takes the turn from a Job lookup: the Jobs'
// watch closes, and they list and watch again once that lookup is met, so
// the kind met last (the Jobs) is the one watched when it is met.
func TestOtherKindTakesTheTurnFromJobs(t *testing.T) {
	ctx, cancel := context.WithCancel(withTurnCtx(context.Background()))
	t.Cleanup(cancel)
	sleep := func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil }
	run := func(l *sliceLister, name string, last bool) chan error {
		res := make(chan error, 1)
		go func() {
			lw := newListWatch(l, selector{label: serviceNameLabel + "=" + name}, func(string, error) {})
			lw.last = last
			lw.waiting = l.parked
			res <- watchSet(ctx, lw, turnOf(ctx), sleep, func(objs []any) (bool, error) {
				return slicesObservation(objs).State == Ready, nil
			})
		}()
		return res
	}
	jobs := newSliceLister(serviceSlice("job", "5", false))
	jobsDone := run(jobs, "job", true)
	var jw *watch.FakeWatcher
	select {
	case jw = <-jobs.watches:
	case <-time.After(10 * time.Second):
		t.Fatal("the Job lookup, alone, never watched")
	}
	notYet := serviceSlice("job", "8", false) // a change its watch sees: not where it goes on from
	jw.Modify(&notYet)
	eventually(t, "the change applied", func() bool { return len(jw.ResultChan()) == 0 })
	svc := newSliceLister(serviceSlice("svc", "5", false))
	svcDone := run(svc, "svc", false)
	var sw *watch.FakeWatcher
	select {
	case sw = <-svc.watches:
	case <-time.After(10 * time.Second):
		t.Fatalf("the Service lookup never took the turn: %s", svc.requests())
	}
	eventually(t, "the Jobs' watch stopped", func() bool { return jw.IsStopped() })
	// Released only once the Job lookup waits for the turn again: taken
	// back at once, it would watch on from 8 (a yield's own path).
	eventually(t, "the Job lookup parked", func() bool {
		jobs.mu.Lock()
		defer jobs.mu.Unlock()
		return jobs.parks > 0
	})
	ready := serviceSlice("svc", "9", true)
	sw.Modify(&ready)
	if err := <-svcDone; err != nil {
		t.Fatal(err)
	}
	select {
	case jw = <-jobs.watches:
	case <-time.After(10 * time.Second):
		t.Fatalf("the Job lookup never watched again: %s", jobs.requests())
	}
	want := "LIST " + serviceNameLabel + "=job; WATCH " + serviceNameLabel + "=job from 10; LIST " + serviceNameLabel + "=job; WATCH " + serviceNameLabel + "=job from 10"
	if got := jobs.requests(); got != want {
		t.Errorf("requests: %s\nwant: %s", got, want)
	}
	done := serviceSlice("job", "10", true)
	jw.Modify(&done)
	if err := <-jobsDone; err != nil {
		t.Fatal(err)
	}
}

// At the start, a Job lookup waits until every lookup of the other kinds
// the wait expects has asked for the turn or ended: it opens no watch that
// a Service lookup would close a moment later.
func TestJobsWaitForTheOthersToArrive(t *testing.T) {
	for _, metByList := range []bool{false, true} {
		t.Run(map[bool]string{false: "the other asks", true: "the other ends"}[metByList], func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			ctx, turn := withTurn(ctx)
			a := turn.expect()
			sleep := func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil }
			jobs := newSliceLister(serviceSlice("job", "5", false))
			go func() {
				lw := newListWatch(jobs, selector{label: serviceNameLabel + "=job"}, func(string, error) {})
				lw.last, lw.waiting = true, jobs.parked
				watchSet(ctx, lw, turn, sleep, func(objs []any) (bool, error) { return false, nil })
			}()
			// Listed, and waiting for the other lookup's arrival: one that
			// did not wait would take the turn at once and never park.
			eventually(t, "the Jobs parked", func() bool {
				jobs.mu.Lock()
				defer jobs.mu.Unlock()
				return jobs.parks > 0
			})
			if got := jobs.requests(); strings.Contains(got, "WATCH") {
				t.Fatalf("the Jobs watch before the other lookup arrived: %s", got)
			}
			svc := newSliceLister(serviceSlice("svc", "5", metByList))
			res := make(chan error, 1)
			go func() {
				lw := newListWatch(svc, selector{label: serviceNameLabel + "=svc"}, func(string, error) {})
				lw.arrival = a
				res <- watchSet(withArrival(ctx, a), lw, turn, sleep, func(objs []any) (bool, error) {
					return slicesObservation(objs).State == Ready, nil
				})
				turn.arrived(a) // as Run does when a lookup ends
			}()
			if !metByList {
				select {
				case sw := <-svc.watches:
					if got := jobs.requests(); strings.Contains(got, "WATCH") {
						t.Fatalf("the Jobs watch beside the Service: %s", got)
					}
					ready := serviceSlice("svc", "6", true)
					sw.Modify(&ready)
				case <-time.After(10 * time.Second):
					t.Fatalf("the Service never watched: %s", svc.requests())
				}
			}
			if err := <-res; err != nil {
				t.Fatal(err)
			}
			select {
			case <-jobs.watches:
			case <-time.After(10 * time.Second):
				t.Fatalf("the Jobs never watched once the other lookup was done: %s", jobs.requests())
			}
		})
	}
}

func withTurnCtx(parent context.Context) context.Context {
	ctx, _ := withTurn(parent)
	return ctx
}
