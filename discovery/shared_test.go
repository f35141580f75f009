package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// sliceLister serves EndpointSlices from items (LIST) and hands each
// WATCH it opens to the test, recording every request with its selector.
type sliceLister struct {
	mu      sync.Mutex
	items   []unstructured.Unstructured
	listErr error
	calls   []string
	watches chan *watch.FakeWatcher
	parks   int // times the lookup parked to wait for its turn (its lw.waiting)
}

func (l *sliceLister) parked() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parks++
}

func newSliceLister(items ...unstructured.Unstructured) *sliceLister {
	return &sliceLister{items: items, watches: make(chan *watch.FakeWatcher, 10)}
}

func (l *sliceLister) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "LIST "+o.LabelSelector)
	if l.listErr != nil {
		return nil, l.listErr
	}
	ul := &unstructured.UnstructuredList{Items: slices.Clone(l.items)}
	ul.SetResourceVersion("10")
	return ul, nil
}

func (l *sliceLister) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "WATCH "+o.LabelSelector+" from "+o.ResourceVersion)
	w := watch.NewFakeWithChanSize(10, false)
	l.watches <- w
	return w, nil
}

func (l *sliceLister) Get(ctx context.Context, name string, o metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	return nil, errors.New("no GET here")
}

func (l *sliceLister) requests() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, "; ")
}

// serviceSlice is an EndpointSlice of service with one endpoint, ready or not.
func serviceSlice(service, rv string, ready bool) unstructured.Unstructured {
	u := unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"endpoints": []any{map[string]any{"addresses": []any{"10.0.0.1"}, "conditions": map[string]any{"ready": ready}}},
	}}
	u.SetNamespace("openstack")
	u.SetName(service + "-x1")
	u.SetLabels(map[string]string{serviceNameLabel: service})
	u.SetResourceVersion(rv)
	return u
}

// sharedRun plans the keys, joins each from its own goroutine as the wait
// does, and returns their results by key, and how often each onSet ran.
type sharedRun struct {
	sh      *shared
	results map[string]chan error
	ctxs    map[string]context.CancelFunc
	mu      sync.Mutex
	sets    map[string]int
}

func startShared(t *testing.T, l lister, keys ...string) *sharedRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sleep := func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil }
	r := &sharedRun{sh: newShared(ctx, l, endpointSlicesKind, sleep), results: map[string]chan error{}, ctxs: map[string]context.CancelFunc{}, sets: map[string]int{}}
	for _, k := range keys {
		r.sh.plan(k)
	}
	for _, k := range keys {
		mctx, mcancel := context.WithCancel(ctx)
		r.ctxs[k] = mcancel
		res := make(chan error, 1)
		r.results[k] = res
		go func() {
			res <- r.sh.join(mctx, k, func(objs []any) (bool, error) {
				r.mu.Lock()
				r.sets[k]++
				r.mu.Unlock()
				for _, o := range objs {
					if got := o.(*unstructured.Unstructured).GetLabels()[serviceNameLabel]; got != k {
						t.Errorf("member %s given %s's slice", k, got)
					}
				}
				return slicesObservation(objs).State == Ready, nil
			}, func(string, error) {}, nil)
		}()
	}
	return r
}

func (r *sharedRun) result(t *testing.T, key string) error {
	t.Helper()
	select {
	case err := <-r.results[key]:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("member %s did not return", key)
		return nil
	}
}

func (r *sharedRun) onSets(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets[key]
}

func nextWatch(t *testing.T, l *sliceLister) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-l.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatalf("no WATCH: %s", l.requests())
		return nil
	}
}

// Every Service already met: one LIST selecting them all, no WATCH.
func TestSharedOneListForAll(t *testing.T) {
	l := newSliceLister(serviceSlice("mariadb", "5", true), serviceSlice("memcached", "6", true))
	r := startShared(t, l, "memcached", "mariadb")
	for _, k := range []string{"mariadb", "memcached"} {
		if err := r.result(t, k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if got, want := l.requests(), "LIST kubernetes.io/service-name in (mariadb,memcached)"; got != want {
		t.Errorf("requests: %s\nwant: %s", got, want)
	}
}

// A member met leaves at once; the watch goes on for the others with the
// selector it has until its next request, which selects only them, from
// the last resourceVersion; it closes when the last leaves. A member sees
// its own objects only, and only when they change.
func TestSharedNarrowsAndCloses(t *testing.T) {
	l := newSliceLister(serviceSlice("mariadb", "5", false))
	r := startShared(t, l, "mariadb", "memcached", "rabbitmq")
	w := nextWatch(t, l)
	m := serviceSlice("mariadb", "11", true)
	w.Modify(&m)
	if err := r.result(t, "mariadb"); err != nil {
		t.Fatal(err)
	}
	if r.onSets("memcached") != 1 {
		t.Errorf("memcached's onSet ran %d times for 1 set of its objects", r.onSets("memcached"))
	}
	w.Stop() // the server's timeout ends the watch: resumed, narrowed
	w = nextWatch(t, l)
	c := serviceSlice("memcached", "12", true)
	w.Add(&c)
	if err := r.result(t, "memcached"); err != nil {
		t.Fatal(err)
	}
	b := serviceSlice("rabbitmq", "13", true)
	w.Add(&b)
	if err := r.result(t, "rabbitmq"); err != nil {
		t.Fatal(err)
	}
	want := "LIST kubernetes.io/service-name in (mariadb,memcached,rabbitmq); " +
		"WATCH kubernetes.io/service-name in (mariadb,memcached,rabbitmq) from 10; " +
		"WATCH kubernetes.io/service-name in (memcached,rabbitmq) from 11"
	if got := l.requests(); got != want {
		t.Errorf("requests:\n%s\nwant:\n%s", got, want)
	}
	for !w.IsStopped() {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}

// A member whose own wait ends (its timeout) leaves; the others go on;
// the watch closes when none is left.
func TestSharedMemberTimesOut(t *testing.T) {
	l := newSliceLister()
	r := startShared(t, l, "mariadb", "memcached")
	w := nextWatch(t, l)
	r.ctxs["mariadb"]()
	if err := r.result(t, "mariadb"); !errors.Is(err, context.Canceled) {
		t.Fatalf("mariadb: %v, want canceled", err)
	}
	c := serviceSlice("memcached", "12", true)
	w.Add(&c)
	if err := r.result(t, "memcached"); err != nil {
		t.Fatal(err)
	}
	if got := l.requests(); strings.Count(got, "WATCH") != 1 {
		t.Errorf("requests: %s", got)
	}
}

// EndpointSlices refused (or not served) at the first LIST: every member
// is told to wait on its own (its Endpoints object), after that one
// request.
func TestSharedSlicesRefused(t *testing.T) {
	l := newSliceLister()
	l.listErr = apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "", errors.New("RBAC"))
	r := startShared(t, l, "mariadb", "memcached")
	for _, k := range []string{"mariadb", "memcached"} {
		if err := r.result(t, k); !errors.Is(err, errOwnWatch) {
			t.Errorf("%s: %v, want errOwnWatch", k, err)
		}
	}
	if got := l.requests(); got != "LIST kubernetes.io/service-name in (mariadb,memcached)" {
		t.Errorf("requests: %s", got)
	}
}

// One member: today's selector, service-name=NAME.
func TestSharedOneMember(t *testing.T) {
	l := newSliceLister(serviceSlice("mariadb", "5", true))
	r := startShared(t, l, "mariadb")
	if err := r.result(t, "mariadb"); err != nil {
		t.Fatal(err)
	}
	if got := l.requests(); got != fmt.Sprintf("LIST %s=mariadb", serviceNameLabel) {
		t.Errorf("requests: %s", got)
	}
}

// The same Service twice (by its name and by namespace/name): two members
// of one key, both told, one name in the selector.
func TestSharedSameServiceTwice(t *testing.T) {
	l := newSliceLister(serviceSlice("mariadb", "5", true))
	sh := newShared(t.Context(), l, endpointSlicesKind, func(ctx context.Context, d time.Duration) bool { return ctx.Err() == nil })
	sh.plan("mariadb")
	sh.plan("mariadb")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			errs <- sh.join(t.Context(), "mariadb", func(objs []any) (bool, error) { return len(objs) == 1, nil }, func(string, error) {}, nil)
		}()
	}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a member did not return: %s", l.requests())
		}
	}
	if got := l.requests(); got != "LIST "+serviceNameLabel+"=mariadb" {
		t.Errorf("requests: %s", got)
	}
}
