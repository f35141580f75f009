package bootstrap

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// The Lease lock against the real API server: replicas race, hand over on
// release, take over after a holder dies, and notice losing the Lease.

func leaseKube(t *testing.T) *discovery.Kube {
	t.Helper()
	k, err := discovery.NewKube(env.Admin(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// leaseSpec GETs the Lease and decodes its spec.
func leaseSpec(t *testing.T, k *discovery.Kube, ns, name string) leaseRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := k.Resource(LeaseGVR, ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var o leaseObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
		t.Fatal(err)
	}
	return o.Spec
}

type leaseResult struct {
	id      string
	held    context.Context
	release func()
	err     error
	at      time.Time
}

// acquireAsync runs l.Acquire in the background; the result arrives on out
// (buffered: one slot per call). At the end of the test a pending Acquire is
// cancelled and a held Lease released.
func acquireAsync(t *testing.T, ctx context.Context, l *Lease, out chan<- leaseResult) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var rel func()
	go func() {
		defer close(done)
		held, release, err := l.Acquire(ctx)
		rel = release
		out <- leaseResult{id: l.Identity, held: held, release: release, err: err, at: time.Now()}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if rel != nil {
			rel()
		}
	})
}

func nextHolder(t *testing.T, ch <-chan leaseResult, within time.Duration) leaseResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Acquire: %v", r.id, r.err)
		}
		return r
	case <-time.After(within):
		t.Fatalf("nobody acquired the lease within %v", within)
		return leaseResult{}
	}
}

func TestLeaseOneHolderThenHandOverOnRelease(t *testing.T) {
	ns, k := env.Namespace(t), leaseKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	seen := map[string][]string{} // identity -> holders it was told of
	ch := make(chan leaseResult, 3)
	for _, id := range []string{"replica-a", "replica-b", "replica-c"} {
		acquireAsync(t, ctx, &Lease{
			Kube: k, Namespace: ns, Name: "db-sync", Identity: id, Duration: 30 * time.Second,
			OnHolder: func(h string) { mu.Lock(); seen[id] = append(seen[id], h); mu.Unlock() },
		}, ch)
	}

	first := nextHolder(t, ch, 30*time.Second)
	// The others have seen the holder, and none acquires in the second
	// after (a window from that event: the wait it began, not a start a
	// loaded machine may not have reached).
	toldOfFirst := func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for id, hs := range seen {
			if id != first.id && slices.Contains(hs, first.id) {
				n++
			}
		}
		return n == 2
	}
	for deadline := time.Now().Add(30 * time.Second); !toldOfFirst(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the others were never told %s holds the lease: %v", first.id, seen)
		}
	}
	select {
	case r := <-ch:
		t.Fatalf("%s acquired too while %s holds the lease (err %v)", r.id, first.id, r.err)
	case <-time.After(time.Second):
	}
	spec := leaseSpec(t, k, ns, "db-sync")
	if spec.HolderIdentity != first.id || spec.LeaseDurationSeconds != 30 || spec.LeaseTransitions != 0 {
		t.Fatalf("lease spec %+v, want holder %s, 30s, 0 transitions", spec, first.id)
	}
	if _, err := time.Parse(metav1.RFC3339Micro, spec.RenewTime); err != nil {
		t.Errorf("renewTime: %v", err)
	}
	if first.held.Err() != nil {
		t.Fatalf("held ended while holding: %v", context.Cause(first.held))
	}

	released := time.Now()
	first.release()
	first.release() // idempotent
	if first.held.Err() == nil {
		t.Error("held not ended by release")
	}
	second := nextHolder(t, ch, 10*time.Second)
	t.Logf("%s took over %v after release", second.id, second.at.Sub(released))
	spec = leaseSpec(t, k, ns, "db-sync")
	if spec.HolderIdentity != second.id || spec.LeaseTransitions != 1 {
		t.Fatalf("after release: lease spec %+v, want holder %s, 1 transition", spec, second.id)
	}

	second.release()
	third := nextHolder(t, ch, 10*time.Second)
	if spec = leaseSpec(t, k, ns, "db-sync"); spec.HolderIdentity != third.id || spec.LeaseTransitions != 2 {
		t.Fatalf("after second release: lease spec %+v, want holder %s, 2 transitions", spec, third.id)
	}
	third.release()
	if spec = leaseSpec(t, k, ns, "db-sync"); spec.HolderIdentity != "" || spec.LeaseDurationSeconds != 1 {
		t.Errorf("after the last release: lease spec %+v, want no holder and 1s, as leaderelection leaves it", spec)
	}

	mu.Lock()
	defer mu.Unlock()
	var holders []string // "" (none) comes between holders, and first when the Lease did not exist yet
	for _, h := range seen[third.id] {
		if h != "" {
			holders = append(holders, h)
		}
	}
	if len(holders) < 2 || holders[0] != first.id || holders[len(holders)-1] != third.id {
		t.Errorf("%s was told of holders %q, want %s first and itself last", third.id, seen[third.id], first.id)
	}
}

func TestLeaseTakenOverAfterHolderDies(t *testing.T) {
	ns, k := env.Namespace(t), leaseKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const dur = 2 * time.Second

	dctx, kill := context.WithCancel(ctx)
	defer kill()
	dead := &Lease{Kube: k, Namespace: ns, Name: "db-sync", Identity: "doomed", Duration: dur, Renew: 200 * time.Millisecond}
	held, release, err := dead.Acquire(dctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release) // after the heir holds it: must leave it alone

	ch := make(chan leaseResult, 1)
	acquireAsync(t, ctx, &Lease{Kube: k, Namespace: ns, Name: "db-sync", Identity: "heir", Duration: dur, Renew: 200 * time.Millisecond}, ch)
	select {
	case r := <-ch:
		t.Fatalf("heir acquired while the holder renews (err %v)", r.err)
	case <-time.After(2 * dur): // the holder must renew to keep it
	}
	if held.Err() != nil {
		t.Fatalf("held ended while renewing: %v", context.Cause(held))
	}

	kill() // SIGKILL: no release
	died := time.Now()
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("held not ended with the ctx given to Acquire")
	}
	spec := leaseSpec(t, k, ns, "db-sync")
	if spec.HolderIdentity != "doomed" {
		t.Fatalf("holder %q right after the ctx ended; only release may clear it", spec.HolderIdentity)
	}
	// The lease expires dur after its last renewal, which a loaded machine
	// may have made well before the kill: measured from that renewal.
	renewed, err := time.Parse(time.RFC3339Nano, spec.RenewTime)
	if err != nil {
		t.Fatalf("renewTime %q: %v", spec.RenewTime, err)
	}

	heir := nextHolder(t, ch, 15*time.Second)
	t.Logf("heir took over %v after the holder died, %v after its last renewal", heir.at.Sub(died), heir.at.Sub(renewed))
	if after := heir.at.Sub(renewed); after < dur {
		t.Errorf("heir took over %v after the holder's last renewal, before the %v lease could expire", after, dur)
	}
	if spec := leaseSpec(t, k, ns, "db-sync"); spec.HolderIdentity != "heir" || spec.LeaseTransitions != 1 {
		t.Errorf("lease spec %+v, want holder heir, 1 transition", spec)
	}
	release() // the dead holder's release after the takeover: a no-op
	if spec := leaseSpec(t, k, ns, "db-sync"); spec.HolderIdentity != "heir" {
		t.Errorf("the dead holder's late release cleared the heir's lease: %+v", spec)
	}
}

func TestLeaseLostToAnotherHolder(t *testing.T) {
	ns, k := env.Namespace(t), leaseKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Renewals are rare here: noticing the intruder within seconds takes the watch.
	l := &Lease{Kube: k, Namespace: ns, Name: "db-sync", Identity: "replica-a", Duration: 60 * time.Second, Renew: 40 * time.Second}
	held, release, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	res := k.Resource(LeaseGVR, ns)
	u, err := res.Get(ctx, "db-sync", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "intruder", "spec", "holderIdentity"); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	select {
	case <-held.Done():
		if cause := context.Cause(held); cause == nil || !strings.Contains(cause.Error(), `"intruder"`) {
			t.Errorf("cause %v, want one naming the intruder", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held not ended after another identity took the lease")
	}
	release()
	if spec := leaseSpec(t, k, ns, "db-sync"); spec.HolderIdentity != "intruder" {
		t.Errorf("release after the loss changed the holder: %+v", spec)
	}
}

func TestLeaseInvalid(t *testing.T) {
	k := leaseKube(t)
	for _, l := range []*Lease{
		{Namespace: "ns", Name: "n", Identity: "i"},
		{Kube: k, Namespace: "ns", Name: "n"},
		{Kube: k, Name: "n", Identity: "i"},
		{Kube: k, Namespace: "ns", Name: "n", Identity: "i", Duration: time.Second, Renew: 2 * time.Second},
	} {
		if _, _, err := l.Acquire(context.Background()); err == nil {
			t.Errorf("%+v: no error", *l)
		}
	}
}

// A Role that lets the agent read Leases but not write them: Acquire ends
// at once with the verb refused and the rule that would fix it, instead of
// retrying until the bootstrap's timeout.
func TestLeaseWriteRefused(t *testing.T) {
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc, err := env.AgentKubeconfig(ctx, ns, rbacv1.PolicyRule{APIGroups: []string{LeaseGVR.Group}, Resources: []string{LeaseGVR.Resource}, Verbs: []string{"get", "list", "watch"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	k, err := discovery.NewKube(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &Lease{Kube: k, Namespace: ns, Name: "db-sync", Identity: "keystone-0"}
	_, _, err = l.Acquire(ctx) // a retry until ctx's minute would end with ctx's error
	if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), `verbs: [get, list, watch, create, update]`) {
		t.Fatalf("Acquire: %v", err)
	}
}
