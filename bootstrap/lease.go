package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/retry"
)

// A Lease lock with the fields and rules of client-go's leaderelection (so
// `kubectl get lease` and other tools read it as usual), but on the dynamic
// client and driven by a watch: leaderelection links k8s.io/api's typed
// clients (twice the binary) and GETs the Lease every retry period. Here a
// waiting replica makes no request until the watch shows a change or the
// holder's lease would have expired.

// LeaseGVR is coordination.k8s.io/v1 leases.
var LeaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// Lease is one coordination.k8s.io/v1 Lease used as a lock among replicas.
type Lease struct {
	Kube      *discovery.Kube
	Namespace string
	Name      string
	Identity  string        // this replica (the pod name); must be non-empty
	Duration  time.Duration // leaseDurationSeconds (rounded up to whole seconds); 0 = 15s
	Renew     time.Duration // how often the holder renews; 0 = Duration/3
	Clock     clock.Clock   // nil = real clock (k8s.io/utils/clock)
	// OnHolder, when set, is called whenever the observed holder changes ("" = none), for progress reports.
	// It is called from the lock's goroutine and must not block.
	OnHolder func(holder string)
	// OnTrouble, when set, receives the watch's API errors (a Role without
	// watch on leases), which the watch retries itself.
	OnTrouble func(op string, err error)
}

// Acquire blocks until l.Identity holds the Lease or ctx ends (then it returns ctx.Err()).
// It returns `held`, a context derived from ctx that is cancelled once the Lease is lost
// (a renewal could not be written before Duration passed since the last successful one,
// or the Lease was observed held by another identity), and `release`, which stops renewing
// and, if still held, clears holderIdentity (so a waiting replica takes over at once, as
// leaderelection's ReleaseOnCancel does). release is idempotent and safe after loss.
//
// Only release clears the holder: when ctx ends, renewing stops and the Lease
// stays held until it expires, as after a SIGKILL. context.Cause(held) says
// why held ended. One exception: if the Lease was acquired just as ctx ended,
// Acquire releases it before returning ctx.Err(), since nobody else could.
func (l *Lease) Acquire(ctx context.Context) (held context.Context, release func(), err error) {
	r, err := l.newRun()
	if err != nil {
		return nil, nil, err
	}
	held, r.cancelHeld = context.WithCancelCause(ctx)
	loopCtx, stop := context.WithCancel(ctx)
	obs := l.Kube.Observe(loopCtx, LeaseGVR, l.Namespace, discovery.Selector{Name: l.Name}, l.OnTrouble)
	obs.Follow() // the lock follows its Lease while it runs: a holder must see a takeover
	go r.loop(loopCtx, stop, obs.C)

	var once sync.Once
	release = func() {
		once.Do(func() {
			stop()
			<-r.done // the loop and the watch have stopped: r is ours to read
			r.cancelHeld(fmt.Errorf("%s: released", r.what()))
			if r.holding {
				// Not derived from ctx's cancellation: releasing after
				// SIGTERM (ctx ended) is the point. Past Duration the
				// Lease expires anyway.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.dur)
				defer cancel()
				r.release(rctx)
			}
		})
	}

	select {
	case <-r.acquired:
	case <-r.done:
	}
	if err := ctx.Err(); err != nil {
		release()
		return nil, nil, err
	}
	select {
	case <-r.acquired:
		return held, release, nil
	default:
		release()
		if r.refused != nil {
			return nil, nil, r.refused
		}
		// the loop ended without ctx ending: cannot happen, but never block or lie
		return nil, nil, fmt.Errorf("%s: the watch ended", r.what())
	}
}

// leaseRecord is the Lease's spec as the lock reads and writes it. The times
// stay strings: they are only compared for change, never with the local clock
// (the writer's clock is another node's).
type leaseRecord struct {
	HolderIdentity       string `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds int32  `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          string `json:"acquireTime,omitempty"`
	RenewTime            string `json:"renewTime,omitempty"`
	LeaseTransitions     int32  `json:"leaseTransitions,omitempty"`
}

type leaseObject struct {
	Spec leaseRecord `json:"spec"`
}

// leaseRun is the state of one Acquire. The loop goroutine owns it; release
// reads it only after the loop has ended (r.done).
type leaseRun struct {
	l          *Lease
	res        dynamic.ResourceInterface
	clock      clock.Clock
	dur, renew time.Duration
	secs       int32 // dur in whole seconds, as written

	synced     bool                       // the watch has delivered a first set
	refused    error                      // the API server refused to write the Lease (403)
	obj        *unstructured.Unstructured // last known Lease (own copy); nil = absent
	rec        leaseRecord                // obj's spec
	observedAt time.Time                  // local time rec was last seen to change: expiry counts from here

	holding   bool
	lost      bool
	renewedAt time.Time // local time the last successful write as holder was sent
	retryAt   time.Time // after a failed write, none before this
	backoff   wait.Backoff

	reported   bool
	lastHolder string

	cancelHeld context.CancelCauseFunc
	acquired   chan struct{} // closed once held
	done       chan struct{} // closed once the loop and the watch have stopped
}

func (l *Lease) newRun() (*leaseRun, error) {
	switch {
	case l.Kube == nil:
		return nil, errors.New("lease: no Kubernetes API client")
	case l.Namespace == "" || l.Name == "":
		return nil, fmt.Errorf("lease %q in namespace %q: both are required", l.Name, l.Namespace)
	case l.Identity == "":
		return nil, fmt.Errorf("lease %s/%s: empty identity", l.Namespace, l.Name)
	}
	dur, renew := l.Duration, l.Renew
	if dur == 0 {
		dur = 15 * time.Second
	}
	if renew == 0 {
		renew = dur / 3
	}
	if dur < 0 || renew <= 0 || renew >= dur {
		return nil, fmt.Errorf("lease %s/%s: renew every %v must be shorter than the duration %v", l.Namespace, l.Name, renew, dur)
	}
	// Rounded up: others then wait at least as long as the holder trusts its lease.
	secs := int32((dur + time.Second - 1) / time.Second)
	c := l.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	r := &leaseRun{
		l: l, res: l.Kube.Resource(LeaseGVR, l.Namespace), clock: c,
		dur: dur, renew: renew, secs: secs,
		acquired: make(chan struct{}), done: make(chan struct{}),
	}
	r.backoff = r.newBackoff()
	return r, nil
}

// newBackoff paces writes after API errors: fast at first, capped so a holder
// retries a few times before its lease runs out.
func (r *leaseRun) newBackoff() wait.Backoff {
	b := retry.Lookup()
	b.Cap = min(b.Cap, r.renew)
	return b
}

func (r *leaseRun) what() string { return "lease " + r.l.Namespace + "/" + r.l.Name }

// loop reacts to the watch and to its one timer until ctx ends or the Lease
// is lost. A timer firing early or late is harmless: step judges by the clock.
func (r *leaseRun) loop(ctx context.Context, stop context.CancelFunc, sets <-chan []*unstructured.Unstructured) {
	defer func() {
		stop()
		for range sets { // until Observe has stopped: nothing outlives release
		}
		close(r.done)
	}()
	next := time.Duration(-1) // < 0: no timer, wait for the watch
	for {
		var t clock.Timer
		var wake <-chan time.Time
		if next >= 0 {
			t = r.clock.NewTimer(next)
			wake = t.C()
		}
		select {
		case <-ctx.Done():
		case set, ok := <-sets:
			if !ok {
				return
			}
			r.see(set)
			r.synced = true
		case <-wake:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil || r.lost {
			return
		}
		if r.synced { // nothing is decided before the Lease's state is known
			next = r.step(ctx)
		}
		if r.lost || r.refused != nil {
			return
		}
	}
}

// see takes in a set the watch delivered (the Lease or nothing).
func (r *leaseRun) see(set []*unstructured.Unstructured) {
	var u *unstructured.Unstructured
	for _, o := range set {
		if o.GetName() == r.l.Name {
			u = o
		}
	}
	switch {
	case u == nil && r.holding:
		// A deletion, or a stale set from a re-list: the renewal finds out
		// which (NotFound) and creates the Lease again.
		return
	case u != nil && r.obj != nil && staleRV(u.GetResourceVersion(), r.obj.GetResourceVersion()):
		// Older than what we wrote or saw: after our own write the watch
		// can still deliver the state before it.
		return
	}
	if u != nil {
		u = u.DeepCopy() // the informer's store owns u
	}
	r.set(u)
}

// staleRV says whether rv is older than known. Resource versions are
// comparable integers (KEP-5504); if either is not, it cannot tell: not stale.
func staleRV(rv, known string) bool {
	c, err := resourceversion.CompareResourceVersion(rv, known)
	return err == nil && c < 0
}

// set records u (nil: absent) as the Lease's current state, notes when its
// record changed, reports a new holder, and gives the Lease up if another
// identity holds it.
func (r *leaseRun) set(u *unstructured.Unstructured) {
	var rec leaseRecord
	if u != nil {
		var o leaseObject
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
			// The API validates a Lease's spec, so this is a broken object:
			// treat it as held by nobody we know, which only expiry frees.
			o.Spec = leaseRecord{HolderIdentity: "(undecodable: " + err.Error() + ")"}
		}
		rec = o.Spec
	}
	if rec != r.rec || (u == nil) != (r.obj == nil) || r.observedAt.IsZero() {
		r.observedAt = r.clock.Now()
	}
	r.obj, r.rec = u, rec
	if !r.reported || rec.HolderIdentity != r.lastHolder {
		r.reported, r.lastHolder = true, rec.HolderIdentity
		if r.l.OnHolder != nil {
			r.l.OnHolder(rec.HolderIdentity)
		}
	}
	if r.holding && u != nil && rec.HolderIdentity != r.l.Identity {
		r.lose(fmt.Errorf("%s: now held by %q", r.what(), rec.HolderIdentity))
	}
}

func (r *leaseRun) lose(cause error) {
	r.holding, r.lost = false, true
	r.cancelHeld(cause)
}

// step makes at most one attempt to acquire or renew, and returns how long
// until the next one is due (< 0: none before the watch shows a change).
func (r *leaseRun) step(ctx context.Context) time.Duration {
	if r.holding {
		return r.stepHolding(ctx)
	}
	now := r.clock.Now()
	if now.Before(r.retryAt) {
		return r.retryAt.Sub(now)
	}
	if h := r.rec.HolderIdentity; r.obj != nil && h != "" && h != r.l.Identity {
		// Expiry as leaderelection judges it: from when this replica saw
		// the record change, by its own clock.
		expiry := r.observedAt.Add(time.Duration(r.rec.LeaseDurationSeconds) * time.Second)
		if now.Before(expiry) {
			return expiry.Sub(now)
		}
	}
	stamp := now.UTC().Format(metav1.RFC3339Micro)
	rec := leaseRecord{
		HolderIdentity:       r.l.Identity,
		LeaseDurationSeconds: r.secs,
		AcquireTime:          stamp,
		RenewTime:            stamp,
		LeaseTransitions:     r.rec.LeaseTransitions,
	}
	if r.obj != nil && r.rec.HolderIdentity == r.l.Identity {
		rec.AcquireTime = r.rec.AcquireTime // ours already (a restarted pod of the same name)
	} else if r.obj != nil {
		rec.LeaseTransitions++
	}
	wctx, cancel := context.WithTimeout(ctx, r.dur)
	defer cancel()
	u, err := r.write(wctx, r.obj, rec)
	switch {
	case err == nil:
		r.holding, r.renewedAt, r.retryAt, r.backoff = true, now, time.Time{}, r.newBackoff()
		r.set(u)
		close(r.acquired)
		return r.renew
	case ctx.Err() != nil:
		return -1
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		// Someone else wrote first: the watch brings what they wrote.
		return -1
	case apierrors.IsForbidden(err):
		// Not a race to retry: the Role lacks a verb, and waiting would
		// only end at the bootstrap's timeout.
		r.refused = fmt.Errorf("%s: %v; the pod's Role needs {apiGroups: [%q], resources: [%q], verbs: [get, list, watch, create, update]} (examples/rbac/bootstrap-lease.yaml)",
			r.what(), err, LeaseGVR.Group, LeaseGVR.Resource)
		return -1
	}
	r.retryAt = now.Add(r.backoff.Step())
	return r.retryAt.Sub(now)
}

// stepHolding renews when due, and gives the Lease up once Duration has
// passed since the last successful renewal: by then another replica may
// judge it expired.
func (r *leaseRun) stepHolding(ctx context.Context) time.Duration {
	now := r.clock.Now()
	deadline := r.renewedAt.Add(r.dur)
	if !now.Before(deadline) {
		r.lose(fmt.Errorf("%s: not renewed within %v", r.what(), r.dur))
		return -1
	}
	due := r.renewedAt.Add(r.renew)
	if !r.retryAt.IsZero() {
		due = r.retryAt
	}
	if now.Before(due) {
		return min(due.Sub(now), deadline.Sub(now))
	}
	// A write still pending at the deadline must not keep held alive.
	wctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()
	err := r.renewOnce(wctx, now)
	switch {
	case err == nil:
		r.renewedAt, r.retryAt, r.backoff = now, time.Time{}, r.newBackoff()
		return r.renew
	case r.lost || ctx.Err() != nil:
		return -1
	}
	r.retryAt = now.Add(r.backoff.Step())
	return min(r.retryAt.Sub(now), deadline.Sub(now))
}

// renewOnce writes a new renewTime on the last known Lease; if that is out of
// date, it reads the Lease once and writes again if it is still ours.
func (r *leaseRun) renewOnce(ctx context.Context, now time.Time) error {
	renewed := func() leaseRecord {
		rec := r.rec
		rec.HolderIdentity, rec.LeaseDurationSeconds = r.l.Identity, r.secs
		rec.RenewTime = now.UTC().Format(metav1.RFC3339Micro)
		if rec.AcquireTime == "" { // recreated after a deletion
			rec.AcquireTime = rec.RenewTime
		}
		return rec
	}
	u, err := r.write(ctx, r.obj, renewed())
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		cur, gerr := r.res.Get(ctx, r.l.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			cur = nil // deleted: create it again, still ours
		case gerr != nil:
			return gerr
		}
		r.set(cur)
		if r.lost { // set gave it up: another holds it
			return fmt.Errorf("%s: lost", r.what())
		}
		u, err = r.write(ctx, r.obj, renewed())
	}
	if err != nil {
		return err
	}
	r.set(u)
	return nil
}

// write creates the Lease with rec (base nil) or updates base with rec, with
// base's resourceVersion: a concurrent writer makes it fail with Conflict.
func (r *leaseRun) write(ctx context.Context, base *unstructured.Unstructured, rec leaseRecord) (*unstructured.Unstructured, error) {
	if base == nil {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "coordination.k8s.io/v1",
			"kind":       "Lease",
			"metadata":   map[string]any{"name": r.l.Name, "namespace": r.l.Namespace},
		}}
		setLeaseRecord(u, rec)
		return r.res.Create(ctx, u, metav1.CreateOptions{})
	}
	u := base.DeepCopy()
	setLeaseRecord(u, rec)
	return r.res.Update(ctx, u, metav1.UpdateOptions{})
}

// setLeaseRecord writes rec's fields into u's spec, keeping the spec's other
// fields (strategy, preferredHolder).
func setLeaseRecord(u *unstructured.Unstructured, rec leaseRecord) {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	if spec == nil {
		spec = map[string]any{}
	}
	spec["holderIdentity"] = rec.HolderIdentity
	spec["leaseDurationSeconds"] = int64(rec.LeaseDurationSeconds)
	spec["acquireTime"] = rec.AcquireTime
	spec["renewTime"] = rec.RenewTime
	spec["leaseTransitions"] = int64(rec.LeaseTransitions)
	u.Object["spec"] = spec
}

// release clears the holder as leaderelection does (holder "", duration 1s),
// if the Lease is still ours. Best effort: errors are retried with backoff
// until ctx ends, then dropped.
func (r *leaseRun) release(ctx context.Context) {
	b := r.newBackoff()
	base := r.obj
	for {
		now := r.clock.Now().UTC().Format(metav1.RFC3339Micro)
		rec := r.rec
		if base != nil {
			if o := (leaseObject{}); runtime.DefaultUnstructuredConverter.FromUnstructured(base.Object, &o) == nil {
				rec = o.Spec
			}
		}
		if base == nil || rec.HolderIdentity != r.l.Identity {
			return // gone, or someone else's now
		}
		rec.HolderIdentity, rec.LeaseDurationSeconds, rec.AcquireTime, rec.RenewTime = "", 1, now, now
		_, err := r.write(ctx, base, rec)
		if err == nil || ctx.Err() != nil || apierrors.IsNotFound(err) {
			return
		}
		if apierrors.IsConflict(err) {
			cur, gerr := r.res.Get(ctx, r.l.Name, metav1.GetOptions{})
			if gerr == nil {
				base = cur // still ours? the loop's first check says
				continue
			}
			if apierrors.IsNotFound(gerr) {
				return
			}
		}
		t := r.clock.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
