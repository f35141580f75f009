package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// Wait runs a step in wait mode: another tool creates the Jobs, wait waits
// for them (the dependency machinery: Failed ends it at once), and the
// success is recorded so that a pod that starts after the Jobs were deleted
// proceeds from the record. what names the Jobs in the record.
func (c *Coordinator) Wait(ctx context.Context, s Step, what string, wait func(context.Context) error) error {
	if done, err := c.fromRecord(ctx, s); done || err != nil {
		return err
	}
	c.report(s, Waiting, "", "waiting for %s", what)
	if err := wait(ctx); err != nil {
		if ctx.Err() != nil {
			return timedOut(ctx, s, fmt.Sprintf("waiting for %s: %v", what, err))
		}
		// Failed before the timeout: stay, not ready and saying why, until
		// it (a crash loop would show the same failure again).
		c.report(s, Failed, "BootstrapJobFailed", "%s: %v", what, err)
		<-ctx.Done()
		return fmt.Errorf("%w: %s: %v", ErrFailed, s, err)
	}
	if _, mine, err := c.record(ctx, s, Entry{Job: what}); err != nil {
		c.log.Warn("the step is done but could not be recorded", "step", s.String(), "error", err.Error())
	} else if mine {
		c.log.Info("bootstrap recorded", "step", s.String(), "record", RecordName(c.cfg.Name))
	}
	c.report(s, Done, "", "%s complete", what)
	return nil
}

// LeaseOptions tune lease mode.
type LeaseOptions struct {
	Duration time.Duration // 0: 15s
}

// errLost: the Lease was lost while the command ran.
var errLost = errors.New("lost the lease")

// Lease runs a step in lease mode: the replicas compete for the Lease
// <name>; the holder runs the command in its own pod while the others watch
// the Lease and the record. If the holder dies, its Lease expires and
// another replica takes it and runs the command again (bootstrap commands
// are idempotent). A Lease is not a fence, so the success is recorded with a
// resourceVersion precondition: exactly one entry, whoever finishes. A
// command that fails hands the Lease on; this replica then waits for
// another's success until ctx ends, and returns ErrFailed.
func (c *Coordinator) Lease(ctx context.Context, s Step, o LeaseOptions, run func(context.Context) (int, error)) error {
	if done, err := c.fromRecord(ctx, s); done || err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Someone else's success ends the competition: watch the record.
	recorded := make(chan *Entry, 1)
	go func() {
		trouble := func(op string, err error) {
			c.report(s, Waiting, "", "API %s of configmap %s: %v", op, RecordName(c.cfg.Name), err)
		}
		record := c.cfg.Kube.Observe(ctx, configMapsGVR, c.cfg.Namespace, discovery.Selector{Name: RecordName(c.cfg.Name)}, trouble)
		for {
			set, ok := <-record.Next()
			if !ok {
				return
			}
			for _, u := range set {
				if e, _ := entryOf(u, s); e != nil {
					recorded <- e
					return
				}
			}
		}
	}()
	holder := ""
	l := &Lease{
		Kube: c.cfg.Kube, Namespace: c.cfg.Namespace, Name: c.cfg.Name, Identity: c.cfg.PodName, Duration: o.Duration,
		OnHolder: func(h string) {
			if h != "" && h != c.cfg.PodName && h != holder {
				c.report(s, Waiting, "", "waiting for pod %s, which holds lease %s", h, c.cfg.Name)
			}
			holder = h
		},
		OnTrouble: func(op string, err error) {
			c.report(s, Waiting, "", "API %s of lease %s: %v", op, c.cfg.Name, err)
		},
	}
	for {
		type acquired struct {
			held    context.Context
			release func()
			err     error
		}
		got := make(chan acquired, 1)
		actx, acancel := context.WithCancel(ctx)
		go func() {
			held, release, err := l.Acquire(actx)
			got <- acquired{held, release, err}
		}()
		var a acquired
		select {
		case e := <-recorded:
			acancel()
			if a := <-got; a.err == nil {
				a.release()
			}
			c.report(s, Done, "", "recorded in configmap %s: done by pod %s at %s", RecordName(c.cfg.Name), e.Holder, e.Finished)
			return nil
		case a = <-got:
		}
		if a.err != nil {
			acancel()
			return timedOut(ctx, s, "waiting for lease "+c.cfg.Name)
		}
		err := c.holding(ctx, a.held, s, run)
		a.release()
		acancel()
		if errors.Is(err, ErrFailed) {
			// The Lease goes to the next replica, which runs the command
			// again; this one stays, not ready and saying why, until the
			// timeout or until another's success is recorded.
			select {
			case e := <-recorded:
				c.report(s, Done, "", "recorded in configmap %s: done by pod %s at %s", RecordName(c.cfg.Name), e.Holder, e.Finished)
				return nil
			case <-ctx.Done():
				return err
			}
		}
		if !errors.Is(err, errLost) {
			return err
		}
		c.log.Warn("lost the bootstrap lease while running the command; competing again", "lease", c.cfg.Name)
	}
}

// holding runs the command as the Lease's holder, unless the step was
// recorded meanwhile (the last holder finished just before its Lease went).
func (c *Coordinator) holding(ctx, held context.Context, s Step, run func(context.Context) (int, error)) error {
	if done, err := c.fromRecord(held, s); done || err != nil {
		if held.Err() != nil && err != nil {
			return errLost
		}
		return err
	}
	c.report(s, Running, "BootstrapRunning", "this pod holds lease %s and runs the command", c.cfg.Name)
	code, err := run(held)
	switch {
	case held.Err() != nil:
		return errLost
	case err != nil:
		c.report(s, Failed, "BootstrapCommandFailed", "the command did not start: %v", err)
		return fmt.Errorf("%w: %s: %v", ErrFailed, s, err)
	case code != 0:
		c.report(s, Failed, "BootstrapCommandFailed", "the command exited with %d; the lease goes to another replica", code)
		return fmt.Errorf("%w: %s: the command exited with %d", ErrFailed, s, code)
	}
	// Recorded under ctx, not held: a success is recorded even if the Lease
	// lapsed at the last moment.
	e, mine, err := c.record(ctx, s, Entry{Holder: c.cfg.PodName})
	switch {
	case err != nil:
		c.log.Warn("the step is done but could not be recorded", "step", s.String(), "error", err.Error())
	case mine:
		c.log.Info("bootstrap recorded", "step", s.String(), "record", RecordName(c.cfg.Name))
	default:
		c.log.Info("the step was recorded by another holder first", "step", s.String(), "holder", e.Holder)
	}
	c.report(s, Done, "", "the command succeeded")
	return nil
}
