package discovery

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kolla-agent/kolla-agent/retry"
)

// lister is the calls a watch needs (and GET, for a Role without list);
// every dynamic client of one resource in one namespace has them.
type lister interface {
	List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	Get(ctx context.Context, name string, o metav1.GetOptions, subresources ...string) (*unstructured.Unstructured, error)
}

// selector narrows a watch to the objects a dependency is about: never a
// namespace-wide watch of a whole resource. name is set when the selector
// is one object by name, which a GET can fetch when LIST is refused.
type selector struct{ label, field, name string }

func byName(name string) selector {
	return selector{field: fields.OneTermEqualSelector("metadata.name", name).String(), name: name}
}

// listWatch is one narrowed LIST and WATCH, with its API errors reported
// through onErr (watchSet retries them itself, with backoff; onErr only
// makes them visible). sel is asked at every request: a shared watch's
// narrows as its members leave (shared.go).
type listWatch struct {
	c     lister
	sel   func() selector
	onErr func(op string, err error)
	last  bool // a Job lookup: its wait's watch turn goes to it last (turn.go)
	// arrival, if not nil, is made when the lookup first asks for the turn.
	arrival *arrival
	// waiting, if not nil, is told when the lookup waits for its turn.
	waiting func()
	// silence, if not 0, replaces watchSilence (tests).
	silence time.Duration
}

// watchSilence is how long a watch may bring nothing, not even a bookmark,
// before it is taken for lost and the watch started again from
// its resourceVersion. kube-apiserver's watch cache sends a watcher that
// asked for bookmarks one about every minute. client-go's HTTP/2 PING
// finds a connection that died, not a watch that went quiet behind a proxy
// that still answers it (an L7 load balancer whose API server is gone), and
// an http:// server (kubectl proxy) is HTTP/1.1, with no PING at all. On a
// server without periodic bookmarks (its watch cache off) a quiet watch is
// renewed this often instead.
const watchSilence = 150 * time.Second

func newListWatch(c lister, sel selector, onErr func(op string, err error)) *listWatch {
	return &listWatch{c: c, sel: func() selector { return sel }, onErr: onErr}
}

func opts(sel selector, rv string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: sel.label, FieldSelector: sel.field, ResourceVersion: rv}
}

func (lw *listWatch) list(ctx context.Context, sel selector) (*unstructured.UnstructuredList, error) {
	l, err := lw.c.List(ctx, opts(sel, ""))
	if err != nil && ctx.Err() == nil && !(apierrors.IsForbidden(err) && sel.name != "") { // one object: watchSet GETs it instead
		lw.onErr("list", err)
	}
	return l, err
}

// watch starts a watch from rv with bookmarks, so a long quiet watch keeps
// a fresh resourceVersion to resume from. The server ends it after a timeout
// drawn between 5 and 10 minutes (the reflector's range), so that the watches
// of many agents started together do not all end together.
func (lw *listWatch) watch(ctx context.Context, rv string) (watch.Interface, error) {
	o := opts(lw.sel(), rv)
	o.AllowWatchBookmarks = true
	timeout := int64(300 + rand.IntN(300))
	o.TimeoutSeconds = &timeout
	wi, err := lw.c.Watch(ctx, o)
	if err != nil && ctx.Err() == nil && !apierrors.IsForbidden(err) { // a refusal is told once by watchSet
		lw.onErr("watch", err)
	}
	return wi, err
}

func apiTrouble(report func(Observation)) func(string, error) {
	return func(op string, err error) { report(unhealthy("API %s: %v", op, err)) }
}

// watchUntil lists and watches the objects lw selects and evaluates eval over
// the whole current set after the list and after every change, until the
// observation settles the wait (see watchSet).
func (w *Waiter) watchUntil(ctx context.Context, d Dependency, report func(Observation), lw *listWatch, eval func([]any) Observation) error {
	last := lastSeen{report: report}
	lw.waiting = last.waiting
	if lw.arrival == nil {
		lw.arrival = arrivalOf(ctx)
	}
	return watchSet(ctx, lw, turnOf(ctx), w.sleep, func(objs []any) (bool, error) {
		return last.settle(ctx, d, eval(objs))
	})
}

// lastSeen is a lookup's last observation, said again, marked as such,
// while the lookup waits for its turn to watch (turn.go): what it reports
// then is as of its LIST or last watch, not now.
type lastSeen struct {
	o      Observation
	report func(Observation)
}

func (l *lastSeen) settle(ctx context.Context, d Dependency, o Observation) (bool, error) {
	l.o = o
	return settle(ctx, d, o, l.report)
}

func (l *lastSeen) waiting() {
	if l.o.State == Waiting || l.o.State == Unhealthy {
		o := l.o
		o.Detail += " (as last listed; looked at again when the wait's one watch is free)"
		l.report(o)
	}
}

// apiRetry is the schedule of a watch's retries after API errors (the API
// server unreachable, restarting, refusing): "full jitter", each wait drawn
// uniformly between minRetry and a bound that doubles from minRetry to
// maxRetry. A lone agent retries a short blip within 100-300 ms; agents that
// lost the same API server in the same instant (its restart) draw apart at
// every step, so that they come back spread over seconds, not all in the
// second it returns: for 10,000 agents and an outage of 5 s or more, about a
// fifth of them in the busiest second, a median of 2-3 s after its return,
// all within 10 s (TestAPIRetrySpreadsAFleet).
type apiRetry struct{ bound time.Duration }

const (
	minRetry = 50 * time.Millisecond
	maxRetry = 10 * time.Second
)

func newAPIRetry() apiRetry { return apiRetry{bound: minRetry} }

// Step returns the next wait.
func (r *apiRetry) Step() time.Duration {
	d := minRetry + rand.N(r.bound)
	r.bound = min(2*r.bound, maxRetry)
	return d
}

// watchSet calls onSet with the whole current set of the objects lw selects,
// first from one LIST and then after every change a WATCH from the list's
// resourceVersion brings, until onSet says done. A set the LIST already
// settles costs that one request. The set is level-based, so a missed event
// cannot leave a caller stuck, and whole, never half-listed (which could say
// "every Job complete" before the last one is listed).
//
// A watch that ends is resumed from the last resourceVersion seen (events or
// bookmarks); one the server no longer has (410 Gone) is re-listed. API
// errors are retried on apiRetry's schedule, so agents that lost the same
// API server do not come back in the same second. This is a reflector
// without its store, its watch-list attempt (which an etcd without
// RequestWatchProgress cannot serve, at one failed request per dependency)
// and its poll for the initial sync.
//
// turn, when not nil, is the wait's one WATCH (turn.go): taken before the
// first, given back when the set is done, when a refused watch turns to
// polls, or (a Job lookup's) when another kind claims it, its watch
// closing. A lookup that had to wait for the turn LISTs again when it
// comes.
func watchSet(ctx context.Context, lw *listWatch, turn *watchTurn, sleep func(context.Context, time.Duration) bool, onSet func([]any) (bool, error)) error {
	var tk *ticket
	held := false
	wctx, yield := context.WithCancel(ctx) // the watch's, while the turn is held
	defer func() {
		yield()
		if held {
			turn.give(tk)
		}
	}()
	b := newAPIRetry()
	set := map[string]*unstructured.Unstructured{}
	rv := ""            // "" : list first
	polls := firstPolls // after a refusal, the polls before the verb is tried again
	told := false       // getPoll's onSet has seen a set
	call := func() []any {
		keys := slices.Sorted(maps.Keys(set))
		objs := make([]any, len(keys))
		for i, k := range keys {
			objs[i] = set[k]
		}
		return objs
	}
	for {
		if rv == "" {
			sel := lw.sel()
			l, err := lw.list(ctx, sel)
			if apierrors.IsForbidden(err) && sel.name != "" {
				// The Role grants get only (helm-toolkit's rule for custom
				// resources): poll the one object by name, and try the
				// LIST again now and then (see firstPolls).
				if n, ok := lw.c.(interface{ refused(verb string, err error) }); ok {
					n.refused("list", err)
				}
				if done, err := getPoll(ctx, lw, sel.name, sleep, set, onSet, call, polls, &told); done {
					return err
				}
				polls = min(2*polls, maxPolls)
				continue
			}
			if err != nil {
				if !sleep(ctx, b.Step()) {
					return ctx.Err()
				}
				continue
			}
			replaceSet(set, l.Items)
			if done, err := onSet(call()); done {
				return err
			}
			rv = l.GetResourceVersion()
		}
		if held && wctx.Err() != nil { // yielded to another kind
			turn.give(tk)
			held = false
		}
		if !held {
			yield()
			wctx, yield = context.WithCancel(ctx)
			var waited, ok bool
			if tk, waited, ok = turn.take(ctx, !lw.last, lw.arrival, yield, lw.waiting); !ok {
				return ctx.Err()
			}
			held = true
			if waited {
				// What was listed is as old as the wait: list again
				// rather than watch from it. The watch cache keeps a
				// bounded window of changes (100 by default, grown to
				// hold about 75 s of them; a db_sync's wait is longer)
				// and none from before its API server's restart, so a
				// WATCH from there would mostly be 410 Gone, a LIST
				// and a WATCH: this is the LIST, and a WATCH if unmet.
				rv = ""
				continue
			}
		}
		wi, err := lw.watch(wctx, rv)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			continue // yielded while asking: ask for the turn again
		}
		if apierrors.IsForbidden(err) {
			// Polls hold no watcher: the turn goes to another lookup.
			turn.give(tk)
			held = false
			// The Role grants get and list, not watch (openstack-helm's
			// entrypoint Role): poll, and try the WATCH again now and then
			// from the last poll (see firstPolls).
			if n, ok := lw.c.(interface{ refused(verb string, err error) }); ok {
				n.refused("watch", err)
			}
			next, done, err := pollSet(ctx, lw, sleep, set, onSet, call, polls)
			if done {
				return err
			}
			if next != "" {
				rv = next
			}
			polls = min(2*polls, maxPolls)
			if !sleep(ctx, pollInterval()) { // the retry takes a poll's turn
				return ctx.Err()
			}
			continue
		}
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			if !sleep(ctx, b.Step()) {
				return ctx.Err()
			}
			continue
		}
		polls = firstPolls // a later refusal is tried again as soon
		silence := lw.silence
		if silence == 0 {
			silence = watchSilence
		}
		next, done, err := follow(wctx, wi, set, rv, silence, onSet, call)
		wi.Stop()
		if done {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if wctx.Err() != nil { // yielded: from here if the turn comes back at once
			rv = next
			continue
		}
		if err != nil {
			lw.onErr("watch", err)
			if !sleep(ctx, b.Step()) {
				return ctx.Err()
			}
		} else {
			b = newAPIRetry() // a watch that ran and ended: resume at once
		}
		rv = next
	}
}

// pollEvery is the pace of a lookup whose watch was refused:
// kubernetes-entrypoint's loop, never faster.
const pollEvery = 2 * time.Second

// A refused verb is tried again after firstPolls polls, then after twice
// as many each time, up to maxPolls (about 5 minutes): a refusal is not
// always the Role's. An API server that has just started refuses until its
// RBAC caches are filled ("clusterrole ... not found"): in BenchmarkScale's
// restart only 212 of 500 agents' 2,500 watches came back, the others
// polling for the rest of the wait. The retry takes a poll's turn, so a lookup never makes more
// than one request per pollEvery.
const (
	firstPolls = 1
	maxPolls   = 128
)

// pollInterval is pollEvery plus up to a quarter more, so a fleet's polls
// do not line up.
func pollInterval() time.Duration { return pollEvery + rand.N(pollEvery/4) }

// pollSet is watchSet for a resource the agent may list but not watch: n
// LISTs at pollInterval (API errors count and are retried at the same
// pace), and onSet only when the set changed. It returns when onSet is
// done, after the n-th LIST (with its resourceVersion, "" when none
// answered), or when ctx ends.
func pollSet(ctx context.Context, lw *listWatch, sleep func(context.Context, time.Duration) bool, set map[string]*unstructured.Unstructured, onSet func([]any) (bool, error), call func() []any, n int) (string, bool, error) {
	rv := ""
	for range n {
		if !sleep(ctx, pollInterval()) {
			return rv, true, ctx.Err()
		}
		l, err := lw.list(ctx, lw.sel())
		if err != nil {
			continue
		}
		rv = l.GetResourceVersion()
		if sameSet(set, l.Items) {
			continue
		}
		replaceSet(set, l.Items)
		if done, err := onSet(call()); done {
			return rv, true, err
		}
	}
	return rv, false, nil
}

// getPoll is pollSet for a Role that grants get but not list: n GETs of the
// one object by name at the same pace (the very first at once, beside the
// first refused LIST), then one more wait, whose turn the retried LIST
// takes. Not found is the empty set; onSet sees the first answer (*told
// false) and then each change.
func getPoll(ctx context.Context, lw *listWatch, name string, sleep func(context.Context, time.Duration) bool, set map[string]*unstructured.Unstructured, onSet func([]any) (bool, error), call func() []any, n int, told *bool) (bool, error) {
	for i := range n {
		if (i > 0 || *told) && !sleep(ctx, pollInterval()) {
			return true, ctx.Err()
		}
		u, err := lw.c.Get(ctx, name, metav1.GetOptions{})
		var items []unstructured.Unstructured
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			if ctx.Err() == nil {
				lw.onErr("get", err)
			}
			continue
		default:
			items = []unstructured.Unstructured{*u}
		}
		if *told && sameSet(set, items) {
			continue
		}
		*told = true
		replaceSet(set, items)
		if done, err := onSet(call()); done {
			return true, err
		}
	}
	if !sleep(ctx, pollInterval()) {
		return true, ctx.Err()
	}
	return false, nil
}

// replaceSet makes set the listed items.
func replaceSet(set map[string]*unstructured.Unstructured, items []unstructured.Unstructured) {
	clear(set)
	for i := range items {
		set[objKey(&items[i])] = &items[i]
	}
}

// sameSet reports whether items are the objects of set at the same
// resourceVersions.
func sameSet(set map[string]*unstructured.Unstructured, items []unstructured.Unstructured) bool {
	if len(set) != len(items) {
		return false
	}
	for i := range items {
		u, ok := set[objKey(&items[i])]
		if !ok || u.GetResourceVersion() != items[i].GetResourceVersion() {
			return false
		}
	}
	return true
}

// follow applies a watch's events to set, calling onSet after each change,
// until the watch ends, brings nothing for silence, or onSet is done. It
// returns the resourceVersion to resume from ("" : re-list) and the error
// the watch ended with, if any.
func follow(ctx context.Context, wi watch.Interface, set map[string]*unstructured.Unstructured, rv string, silence time.Duration, onSet func([]any) (bool, error), call func() []any) (string, bool, error) {
	quiet := time.NewTimer(silence)
	defer quiet.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, false, nil
		case <-quiet.C:
			return rv, false, nil // the caller's Stop ends the request
		case ev, ok = <-wi.ResultChan():
		}
		quiet.Reset(silence)
		if !ok {
			return rv, false, nil
		}
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return "", false, nil // compacted: re-list, not a failure
			}
			return "", false, err
		}
		u, isU := ev.Object.(*unstructured.Unstructured)
		if !isU {
			return "", false, fmt.Errorf("unexpected %T in a watch", ev.Object)
		}
		rv = u.GetResourceVersion()
		switch ev.Type {
		case watch.Bookmark:
			continue
		case watch.Deleted:
			delete(set, objKey(u))
		default:
			set[objKey(u)] = u
		}
		if done, err := onSet(call()); done {
			return rv, true, err
		}
	}
}

func objKey(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

func (w *Waiter) namespace(d Dependency) string {
	if d.Namespace != "" {
		return d.Namespace
	}
	return w.cfg.Namespace
}

// notFinal passes on an intermediate step's observations but its "ready",
// which only means the next step can start.
func notFinal(report func(Observation)) func(Observation) {
	return func(o Observation) {
		if o.State != Ready {
			report(o)
		}
	}
}

// podReady: the pod's Ready condition is True and it is not being deleted.
func podReady(p *pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

func podsOf(objs []any) []*pod {
	pods := decodeAll[pod](objs)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// waitPods: some pod with the labels (on this node, if asked) is Ready.
func (w *Waiter) waitPods(ctx context.Context, d Dependency, report func(Observation)) error {
	ns := w.namespace(d)
	sel := selector{label: labels.SelectorFromSet(d.Labels).String()}
	where := ""
	if d.SameNode {
		node, err := w.nodeName(ctx, report)
		if err != nil {
			return err
		}
		sel.field = fields.OneTermEqualSelector("spec.nodeName", node).String()
		where = " on node " + node
	}
	lw := newListWatch(w.cfg.Kube.in(podsGVR, ns), sel, apiTrouble(report))
	return w.watchUntil(ctx, d, report, lw, func(objs []any) Observation {
		return podsObservation(podsOf(objs), where)
	})
}

func podsObservation(pods []*pod, where string) Observation {
	if len(pods) == 0 {
		return waiting("no pod matches%s", where)
	}
	var notReady []string
	for _, p := range pods {
		if podReady(p) {
			return ready("pod %s is ready%s", p.Name, where)
		}
		notReady = append(notReady, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
	}
	return waiting("no pod ready%s: %s", where, strings.Join(first(notReady, 5), ", "))
}

// waitContainer: a named container of the agent's own pod is ready.
func (w *Waiter) waitContainer(ctx context.Context, d Dependency, report func(Observation)) error {
	ns := w.cfg.Namespace
	lw := newListWatch(w.cfg.Kube.in(podsGVR, ns), byName(w.cfg.PodName), apiTrouble(report))
	return w.watchUntil(ctx, d, report, lw, func(objs []any) Observation {
		pods := podsOf(objs)
		if len(pods) == 0 {
			return waiting("own pod %s/%s not found", ns, w.cfg.PodName)
		}
		return containerObservation(pods[0], d.Name)
	})
}

func containerObservation(p *pod, name string) Observation {
	statuses := append(append([]containerStatus(nil), p.Status.ContainerStatuses...), p.Status.InitContainerStatuses...)
	for _, s := range statuses {
		if s.Name != name {
			continue
		}
		if s.Ready {
			return ready("container %s is ready", name)
		}
		state := "not started"
		switch {
		case s.State.Running != nil:
			state = "running, not ready"
		case s.State.Waiting != nil:
			state = "waiting: " + s.State.Waiting.Reason
		case s.State.Terminated != nil:
			state = fmt.Sprintf("terminated: %s (exit %d)", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
		return waiting("container %s %s", name, state)
	}
	for _, c := range append(append([]named(nil), p.Spec.Containers...), p.Spec.InitContainers...) {
		if c.Name == name {
			return waiting("container %s has no status yet", name)
		}
	}
	return failed("pod %s has no container %q", p.Name, name)
}

// nodeNameCache remembers the agent's node once it is known.
type nodeNameCache struct {
	mu   sync.Mutex
	name string
}

// nodeName returns the node the agent's pod runs on: from NODE_NAME when the
// pod spec passes it, else from one GET of the pod, retried with backoff.
func (w *Waiter) nodeName(ctx context.Context, report func(Observation)) (string, error) {
	w.node.mu.Lock()
	defer w.node.mu.Unlock()
	if w.node.name != "" {
		return w.node.name, nil
	}
	b := retry.Lookup()
	for {
		p, err := w.cfg.Kube.getPod(ctx, w.cfg.Namespace, w.cfg.PodName)
		switch {
		case ctx.Err() != nil:
			return "", ctx.Err()
		case err != nil:
			report(unhealthy("looking up own pod %s/%s: %v", w.cfg.Namespace, w.cfg.PodName, err))
		case p.Spec.NodeName == "":
			report(waiting("own pod %s/%s is not scheduled yet", w.cfg.Namespace, w.cfg.PodName))
		default:
			w.node.name = p.Spec.NodeName
			return w.node.name, nil
		}
		if !w.sleep(ctx, b.Step()) {
			return "", ctx.Err()
		}
	}
}

func first(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}
