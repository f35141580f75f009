package discovery

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
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

// Observe lists and watches the objects of gvr in ns that sel selects (one
// narrowed list+watch, resumed on errors, never a poll) and sends the whole
// current set once synced and after every change. A slow reader gets only
// the latest set: the state is level-based, so nothing is lost by skipping.
// API errors go to onErr (nil: dropped) as they happen; the reflector
// retries them itself. The channel is closed once ctx ends.
func (k *Kube) Observe(ctx context.Context, gvr schema.GroupVersionResource, ns string, sel Selector, onErr func(op string, err error)) <-chan []*unstructured.Unstructured {
	if onErr == nil {
		onErr = func(string, error) {}
	}
	out := make(chan []*unstructured.Unstructured, 1)
	lw := newListWatch(k.in(gvr, ns), sel.narrow(), onErr)
	go func() {
		defer close(out)
		b := backoff()
		for ctx.Err() == nil {
			watchSet(ctx, lw, sleepCtx, func(objs []any) (bool, error) {
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
				return false, nil
			})
			sleepCtx(ctx, b.Step()) // the informer's watcher ended: start again
		}
	}()
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
