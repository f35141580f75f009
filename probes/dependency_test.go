package probes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// followLooker plays discovery's Follow: the test pushes observations.
type followLooker struct {
	mu     sync.Mutex
	report func(discovery.Observation)
	ready  chan struct{}
}

func (f *followLooker) Look(context.Context, discovery.Dependency) discovery.Observation {
	return discovery.Observation{State: discovery.Ready, Detail: "looked"}
}

func (f *followLooker) Follow(ctx context.Context, _ discovery.Dependency, report func(discovery.Observation)) error {
	f.mu.Lock()
	f.report = report
	f.mu.Unlock()
	close(f.ready)
	<-ctx.Done()
	return ctx.Err()
}

func (f *followLooker) push(o discovery.Observation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.report(o)
}

// An API object's state is followed; API trouble keeps the last state seen
// (and says so) instead of failing; before any state, trouble fails.
func TestDependencyCheckAPITrouble(t *testing.T) {
	d, err := discovery.Parse("service:rabbitmq")
	if err != nil {
		t.Fatal(err)
	}
	f := &followLooker{ready: make(chan struct{})}
	c := NewDependency(d, f, nil)
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Check(ctx); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Fatalf("before any observation: %v", err)
	}
	select {
	case <-f.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow not started by the first Check")
	}
	unhealthy := discovery.Observation{State: discovery.Unhealthy, Detail: "API list: connection refused"}
	f.push(unhealthy)
	if _, err := c.Check(ctx); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("trouble before any state must fail: %v", err)
	}
	f.push(discovery.Observation{State: discovery.Ready, Detail: "1 of 1 endpoints ready"})
	f.push(unhealthy)
	detail, err := c.Check(ctx)
	if err != nil || !strings.Contains(detail, "last known") || !strings.Contains(detail, "connection refused") {
		t.Errorf("trouble after ready: %q %v, want a pass that says last known", detail, err)
	}
	f.push(discovery.Observation{State: discovery.Waiting, Detail: "0 of 1 endpoints ready"})
	if _, err := c.Check(ctx); err == nil || !strings.Contains(err.Error(), "0 of 1") {
		t.Errorf("a real change after the trouble: %v", err)
	}
	f.push(unhealthy)
	if _, err := c.Check(ctx); err == nil {
		t.Error("trouble after not-ready must keep failing")
	}
	// Local kinds are looked at directly.
	tcp, _ := discovery.Parse("tcp:127.0.0.1:1")
	if detail, err := NewDependency(tcp, f, nil).Check(ctx); err != nil || detail != "looked" {
		t.Errorf("local look: %q %v", detail, err)
	}
}
