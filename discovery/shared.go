package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// A shared watch is one LIST and WATCH of a resource in one namespace for
// every dependency of a wait that reads it, its members: the Services a pod
// waits for are one EndpointSlice watch selecting `service-name in (a,b)`,
// not one watch each. The API server keeps one watcher where it kept one
// per dependency (a watcher's heap is what grows with a fleet of waiting
// pods: docs/scale.md), and a pod whose dependencies are met makes one
// LIST per shared watch.
//
// Its members are planned before the first LIST, which selects them all.
// A member that is met leaves; the selector narrows to those left at the
// next request the watch makes anyway (a resume or a re-list), never at
// a request of its own; the watch closes when the last member leaves.
type shared struct {
	lw     *listWatch
	kind   sharedKind
	parent context.Context // the whole wait's: the watch ends with it
	sleep  func(context.Context, time.Duration) bool

	mu      sync.Mutex
	members []*member // two may have one key: the same Service twice
	waiting int       // planned members that have not joined
	sel     selector  // the last selector asked: with no member left, the watch is closing
	listed  bool      // a LIST answered
	cancel  context.CancelFunc
	end     error // given to the members left when the watch ends
}

// sharedKind is what a shared watch of one resource needs to know.
type sharedKind struct {
	// last: its watch takes the wait's turn after other kinds' (turn.go).
	last bool
	// of is the member an object belongs to ("" : none).
	of func(*unstructured.Unstructured) string
	// sel selects the objects of the members with these keys (sorted, at
	// least one).
	sel func(keys []string) selector
	// ended says, from an error of the first LIST, that the members must
	// wait on their own, and why (nil: retry it).
	ended func(err error, listed bool) error
}

// member is one dependency in a shared watch.
type member struct {
	key     string
	joined  bool
	onSet   func(objs []any) (bool, error) // its objects: the wait's eval and settle
	trouble func(op string, err error)
	waiting func()     // the watch waits for its turn
	done    chan error // its result, sent once
	told    bool       // onSet has seen its objects
	seen    string     // their keys and resourceVersions then (versions)
}

// errOwnWatch ends a member's part in a shared watch whose resource it
// must read another way (EndpointSlices not served: the Endpoints object).
var errOwnWatch = errors.New("waiting on its own")

// endpointSlicesKind shares the EndpointSlices of Services by their
// kubernetes.io/service-name label. A 403 or 404 on the first LIST means
// the slices are not served or not permitted: each Service then reads
// its Endpoints object by name (RBAC grants those by name).
var endpointSlicesKind = sharedKind{
	of: func(u *unstructured.Unstructured) string { return u.GetLabels()[serviceNameLabel] },
	sel: func(keys []string) selector {
		if len(keys) == 1 {
			return selector{label: serviceNameLabel + "=" + keys[0]}
		}
		r, err := labels.NewRequirement(serviceNameLabel, selection.In, keys)
		if err != nil { // a Service name is a valid label value
			panic(err)
		}
		return selector{label: labels.NewSelector().Add(*r).String()}
	},
	ended: func(err error, listed bool) error {
		// Only the first list decides: once slices were listed, a 403 or
		// 404 is an API server still starting (its authorizer or its
		// discovery not ready yet), to be retried.
		if !listed && (apierrors.IsNotFound(err) || apierrors.IsForbidden(err)) {
			return errOwnWatch
		}
		return nil
	},
}

const serviceNameLabel = "kubernetes.io/service-name"

func newShared(parent context.Context, c lister, kind sharedKind, sleep func(context.Context, time.Duration) bool) *shared {
	s := &shared{kind: kind, parent: parent, sleep: sleep}
	s.lw = &listWatch{c: c, sel: s.selector, onErr: s.onErr, last: kind.last, waiting: s.turnWait}
	return s
}

// plan adds a member to come: the watch starts once every planned member
// has joined, so that its first LIST selects them all.
func (s *shared) plan(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = append(s.members, &member{key: key, done: make(chan error, 1)})
	s.waiting++
}

// join is a planned member's wait: onSet sees the member's objects, first
// after the LIST and then after each change to them, until it is done, ctx
// ends (the member leaves; the others go on), or the watch ends for all.
// The last to join starts the watch.
//
// waiting, if not nil, is told when the watch waits for its turn (turn.go)
// while the member is not met yet.
func (s *shared) join(ctx context.Context, key string, onSet func([]any) (bool, error), trouble func(string, error), waiting func()) error {
	s.mu.Lock()
	i := slices.IndexFunc(s.members, func(m *member) bool { return m.key == key && !m.joined })
	if i < 0 {
		s.mu.Unlock()
		return fmt.Errorf("%s joins a shared watch it was not planned in", key) // a bug, not an outage
	}
	m := s.members[i]
	m.onSet, m.trouble, m.waiting, m.joined = onSet, trouble, waiting, true
	s.waiting--
	var wctx context.Context
	if s.waiting == 0 {
		wctx, s.cancel = context.WithCancel(s.parent)
	}
	s.mu.Unlock()
	if wctx != nil {
		go s.run(wctx)
	}
	stop := context.AfterFunc(ctx, func() { s.leave(m, ctx.Err()) })
	defer stop()
	return <-m.done
}

func (s *shared) run(ctx context.Context) {
	err := watchSet(ctx, s.lw, turnOf(ctx), s.sleep, s.onSet)
	turnOf(ctx).arrived(s.lw.arrival) // if it ended without asking
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel()
	if s.end == nil {
		s.end = cmp.Or(err, ctx.Err(), context.Canceled)
	}
	for _, m := range s.members {
		m.done <- s.end
	}
	s.members = nil
}

// onSet gives each member its objects when they changed since it last saw
// them; it is done when no member is left.
func (s *shared) onSet(objs []any) (bool, error) {
	by := map[string][]any{}
	for _, o := range objs {
		if k := s.kind.of(o.(*unstructured.Unstructured)); k != "" {
			by[k] = append(by[k], o)
		}
	}
	for _, m := range s.current() {
		mine := by[m.key]
		v := versions(mine)
		if m.told && v == m.seen {
			continue
		}
		m.told, m.seen = true, v
		if done, err := m.onSet(mine); done {
			s.leave(m, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed = true
	return len(s.members) == 0, nil
}

// leave takes m out with its result, closing the watch after the last.
func (s *shared) leave(m *member, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.members, m)
	if i < 0 {
		return // gone already: its result is sent
	}
	s.members = slices.Delete(s.members, i, i+1)
	m.done <- err
	if len(s.members) == 0 && s.cancel != nil {
		s.cancel()
	}
}

// turnWait tells the members left that the watch waits for its turn.
func (s *shared) turnWait() {
	for _, m := range s.current() {
		if m.waiting != nil {
			m.waiting()
		}
	}
}

// has says whether a member has the key.
func (s *shared) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.members, func(m *member) bool { return m.key == key })
}

// current is the members now.
func (s *shared) current() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.members)
}

// selector selects the members left; with none (the watch is closing), the
// last one asked.
func (s *shared) selector() selector {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.members) > 0 {
		keys := make([]string, len(s.members))
		for i, m := range s.members {
			keys[i] = m.key
		}
		slices.Sort(keys)
		s.sel = s.kind.sel(slices.Compact(keys))
	}
	return s.sel
}

// onErr tells every member of an API error, or ends the watch for them
// all when the kind says they must wait on their own.
func (s *shared) onErr(op string, err error) {
	s.mu.Lock()
	listed := s.listed
	s.mu.Unlock()
	if op == "list" {
		if end := s.kind.ended(err, listed); end != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.end = end
			s.cancel()
			return
		}
	}
	for _, m := range s.current() {
		m.trouble(op, err)
	}
}

// versions says which objects objs are, at which resourceVersions: the
// set watchSet gives is in key order, so equal sets give equal strings.
func versions(objs []any) string {
	var b strings.Builder
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		b.WriteString(objKey(u) + "@" + u.GetResourceVersion() + "\n")
	}
	return b.String()
}
