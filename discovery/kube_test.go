package discovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// refusingLister refuses WATCH (and LIST, with listRefused) for the first
// refusals calls of that verb, and records every request with the waits
// before it.
type refusingLister struct {
	refusals    int
	listRefused bool
	calls       []string
	watches     int
	lists       int
	rv          int
	watcher     *watch.FakeWatcher
}

var errRefused = apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "x", errors.New("RBAC: clusterrole not found"))

func (l *refusingLister) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	l.lists++
	if l.listRefused && l.lists <= l.refusals {
		l.calls = append(l.calls, "LIST 403")
		return nil, errRefused
	}
	l.rv++
	l.calls = append(l.calls, "LIST")
	ul := &unstructured.UnstructuredList{}
	ul.SetResourceVersion(fmt.Sprint(l.rv))
	return ul, nil
}

func (l *refusingLister) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.watches++
	if !l.listRefused && l.watches <= l.refusals {
		l.calls = append(l.calls, "WATCH 403")
		return nil, errRefused
	}
	l.calls = append(l.calls, "WATCH from "+o.ResourceVersion)
	l.watcher = watch.NewFakeWithChanSize(1, false)
	u := &unstructured.Unstructured{}
	u.SetName("x")
	u.SetResourceVersion("99")
	l.watcher.Add(u) // the object that settles the set
	return l.watcher, nil
}

func (l *refusingLister) Get(ctx context.Context, name string, o metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	l.calls = append(l.calls, "GET")
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "gadgets"}, name)
}

// run is watchSet on l until an object shows up (or the fake clock's
// budget of waits is spent), with every wait recorded in l.calls.
func (l *refusingLister) run(t *testing.T, sel selector, budget int) (waits int, sets int) {
	t.Helper()
	sleep := func(ctx context.Context, d time.Duration) bool {
		if d < pollEvery && strings.Contains(strings.Join(l.calls, ","), "403") {
			t.Errorf("a wait of %v after a refusal: under kubernetes-entrypoint's pace", d)
		}
		waits++
		l.calls = append(l.calls, "wait")
		return waits <= budget
	}
	err := watchSet(context.Background(), newListWatch(l, sel, func(string, error) {}), nil, sleep, func(objs []any) (bool, error) {
		sets++
		return len(objs) > 0, nil
	})
	if err != nil && waits <= budget {
		t.Fatalf("watchSet: %v", err)
	}
	return waits, sets
}

// A WATCH refused by an API server whose RBAC caches are not filled yet (it
// has just started) is tried again after 1 poll, then 2, then 4...: the
// lookup is back on a watch once the refusal ends, never above one request
// per wait, and the watch resumes from the last poll's resourceVersion.
func TestRefusedWatchIsTriedAgain(t *testing.T) {
	l := &refusingLister{refusals: 2}
	l.run(t, selector{label: "a=b"}, 100)
	want := "LIST,WATCH 403,wait,LIST,wait,WATCH 403,wait,LIST,wait,LIST,wait,WATCH from 4"
	if got := strings.Join(l.calls, ","); got != want {
		t.Errorf("requests:\n%s\nwant:\n%s", got, want)
	}
}

// A Role without watch (helm-toolkit's): one poll per wait, and the WATCH
// tried after 1, 2, 4, ... 128 polls, so about one request in 128 is a
// refused WATCH once the first minutes are past.
func TestWatchNeverGrantedPollsAtThePace(t *testing.T) {
	l := &refusingLister{refusals: 1 << 30}
	waits, _ := l.run(t, selector{label: "a=b"}, 600)
	requests := l.lists + l.watches
	if requests > waits+1 {
		t.Errorf("%d requests in %d waits: more than one per wait", requests, waits)
	}
	// 1 at the start, then after 1, 2, 4, ..., 128 polls (255 polls and 8
	// tries: 263 waits), then every 128 polls and a try (600-263 = 337
	// waits: 2 more).
	if l.watches != 11 {
		t.Errorf("%d WATCHes in %d waits, want 11: %v", l.watches, waits, l.calls)
	}
}

// A LIST refused for one object by name (a Role granting get only): GETs
// at the pace, the first at once and told to onSet even when not found,
// and the LIST tried again after 1, 2, 4... GETs, in a GET's turn.
func TestRefusedListIsTriedAgain(t *testing.T) {
	l := &refusingLister{refusals: 2, listRefused: true}
	_, sets := l.run(t, byName("x"), 100)
	want := "LIST 403,GET,wait,LIST 403,wait,GET,wait,GET,wait,LIST,WATCH from 1"
	if got := strings.Join(l.calls, ","); got != want {
		t.Errorf("requests:\n%s\nwant:\n%s", got, want)
	}
	if sets != 3 { // the first GET's empty set, the LIST's, the watch's object
		t.Errorf("onSet called %d times, want 3", sets)
	}
}

// silentLister's watches bring nothing: a connection lost without a reset.
type silentLister struct {
	refusingLister
	mu      sync.Mutex
	watches []string
	stopped int
}

func (l *silentLister) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watches = append(l.watches, o.ResourceVersion)
	w := watch.NewFake()
	go func() {
		<-ctx.Done()
		w.Stop()
	}()
	return stopCounter{w, func() { l.mu.Lock(); l.stopped++; l.mu.Unlock() }}, nil
}

type stopCounter struct {
	watch.Interface
	onStop func()
}

func (s stopCounter) Stop() { s.onStop(); s.Interface.Stop() }

// A watch that brings nothing, not even a bookmark, for watchSilence is
// dropped and started again from its resourceVersion, without a LIST:
// HTTP/2's PING finds a dead connection, not a watch gone quiet behind a
// proxy that still answers it.
func TestSilentWatchIsStartedAgain(t *testing.T) {
	l := &silentLister{}
	lw := newListWatch(l, selector{label: "a=b"}, func(string, error) {})
	lw.silence = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watchSet(ctx, lw, nil, func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil }, func(objs []any) (bool, error) { return false, nil })
	}()
	eventually(t, "a third watch", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.watches) >= 3
	})
	cancel()
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lists != 1 || l.watches[0] != "1" || l.watches[1] != "1" || l.stopped < 2 {
		t.Errorf("%d LISTs, watches from %v, %d stopped: want 1 LIST, every watch from 1, each silent one stopped", l.lists, l.watches, l.stopped)
	}
}
