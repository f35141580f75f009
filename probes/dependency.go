package probes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/retry"
)

// Looker is what the dependency check needs of discovery: one look at a
// local dependency, or a watch that follows an API object.
type Looker interface {
	Look(ctx context.Context, d discovery.Dependency) discovery.Observation
	Follow(ctx context.Context, d discovery.Dependency, report func(discovery.Observation)) error
}

// DependencyCheck: a dependency of the wait syntax still resolves. Local
// ones (DNS, TCP, HTTP, file, socket) are looked at once per check; API
// objects are followed by one watch started at the first check, and each
// check reads its latest state: the API server is never polled. While the
// API server cannot be reached the object's last seen state stands.
type DependencyCheck struct {
	dep discovery.Dependency
	w   Looker
	log *slog.Logger

	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last *discovery.Observation // the object's last seen state
	// trouble is the API trouble seen since: the watch cannot say anything
	// while the API server is unreachable, and the object's state is kept.
	trouble string
}

// NewDependency checks d through w.
func NewDependency(d discovery.Dependency, w Looker, log *slog.Logger) *DependencyCheck {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &DependencyCheck{dep: d, w: w, log: log}
}

// Check implements Checker.
func (c *DependencyCheck) Check(ctx context.Context) (string, error) {
	if !c.dep.Kind.NeedsAPI() {
		return verdict(c.dep, c.w.Look(ctx, c.dep))
	}
	c.once.Do(c.follow)
	c.mu.Lock()
	last, trouble := c.last, c.trouble
	c.mu.Unlock()
	switch {
	case last == nil && trouble != "":
		return "", fmt.Errorf("%s: %s", c.dep, trouble)
	case last == nil:
		return "", fmt.Errorf("%s: watch not synced yet", c.dep)
	}
	detail, err := verdict(c.dep, *last)
	if trouble != "" && err == nil {
		// An API server outage is not the dependency's: failing readiness of
		// every pod that follows an object would turn it into a cluster-wide
		// outage. The last state seen stands, and says so.
		detail += " (last known; " + trouble + ")"
	}
	return detail, err
}

func verdict(d discovery.Dependency, o discovery.Observation) (string, error) {
	if o.State == discovery.Ready {
		return o.Detail, nil
	}
	return "", fmt.Errorf("%s: %s: %s", d, o.State, o.Detail)
}

// follow starts the watch; it runs until Close, started again with backoff
// whenever it ends on an error of its own.
func (c *DependencyCheck) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		retry.Forever(ctx, retry.Loop{Schedule: retry.Restart(), Failed: func(err error, _ time.Duration) {
			if err == nil {
				err = errors.New("watch ended")
			}
			c.log.Debug("dependency watch ended; starting it again", "dependency", c.dep.String(), "error", err.Error())
		}}, func(ctx context.Context) error {
			return c.w.Follow(ctx, c.dep, func(o discovery.Observation) {
				c.mu.Lock()
				defer c.mu.Unlock()
				if o.State == discovery.Unhealthy {
					c.trouble = o.Detail
					return
				}
				c.last, c.trouble = &o, ""
			})
		})
	}()
}

// Close stops the watch and waits for it.
func (c *DependencyCheck) Close() error {
	c.once.Do(func() {}) // a check never run has nothing to stop
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	return nil
}
