package discovery

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kolla-agent/kolla-agent/retry"
)

// Selector narrows Observe to the objects a caller is about: one by name, or
// those with every label. Never a namespace-wide watch of a resource.
type Selector struct {
	Name   string
	Labels map[string]string
}

func (s Selector) narrow() selector {
	if s.Name != "" {
		sel := byName(s.Name)
		if len(s.Labels) > 0 {
			sel.label = labels.SelectorFromSet(s.Labels).String()
		}
		return sel
	}
	return selector{label: labels.SelectorFromSet(s.Labels).String()}
}

// Resource is the dynamic client of one resource in one namespace ("" for
// cluster scope), for other packages' reads and writes.
func (k *Kube) Resource(gvr schema.GroupVersionResource, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return k.dynamic.Resource(gvr)
	}
	return k.dynamic.Resource(gvr).Namespace(ns)
}

// Observed is one narrowed LIST of objects, and the WATCH that follows it
// once its caller asks: a lookup the listed objects already settle costs that
// one request.
type Observed struct {
	// C receives the whole current set: the LIST's first, then, once
	// followed, the latest after every change. A slow reader gets only the
	// latest set: the state is level-based, so nothing is lost by skipping.
	// C is closed once ctx ends.
	C      <-chan []*unstructured.Unstructured
	follow chan struct{}
	once   sync.Once
	asked  bool // Next was called: the next call follows
}

// Follow asks for the changes after the listed set: the WATCH (from the
// LIST's resourceVersion, so nothing in between is missed) opens on the
// first call. A caller the listed set settles never calls it. Idempotent and
// safe from any goroutine.
func (o *Observed) Follow() { o.once.Do(func() { close(o.follow) }) }

// Next returns C for a loop that receives from nothing else (and ctx):
// every call after the first follows, since the caller is back for another
// set. Only the receiving goroutine may call it.
func (o *Observed) Next() <-chan []*unstructured.Unstructured {
	if o.asked {
		o.Follow()
	}
	o.asked = true
	return o.C
}

// Observe lists the objects of gvr in ns that sel selects (narrowed, never a
// namespace-wide watch) and sends the set on C; once followed, it watches
// them (resumed on errors, never a poll) and sends the whole set after every
// change. API errors go to onErr (nil: dropped) as they happen; they are
// retried on apiRetry's schedule.
func (k *Kube) Observe(ctx context.Context, gvr schema.GroupVersionResource, ns string, sel Selector, onErr func(op string, err error)) *Observed {
	if onErr == nil {
		onErr = func(string, error) {}
	}
	out := make(chan []*unstructured.Unstructured, 1)
	o := &Observed{C: out, follow: make(chan struct{})}
	lw := newListWatch(k.in(gvr, ns), sel.narrow(), onErr)
	// watchSet returns only once ctx ends: it retries API errors itself.
	go func() {
		defer close(out)
		listed := false
		watchSet(ctx, lw, nil, sleepCtx, func(objs []any) (bool, error) {
			set := make([]*unstructured.Unstructured, 0, len(objs))
			for _, o := range objs {
				if u, ok := o.(*unstructured.Unstructured); ok {
					set = append(set, u)
				}
			}
			select { // keep only the latest set
			case <-out:
			default:
			}
			out <- set
			if !listed { // no watch until the caller asks for one
				listed = true
				select {
				case <-o.follow:
				case <-ctx.Done():
					return true, nil
				}
			}
			return false, nil
		})
	}()
	return o
}

// sleepCtx waits on the real clock (observers have none of their own).
func sleepCtx(ctx context.Context, d time.Duration) bool { return retry.Sleep(ctx, nil, d) }
