package discovery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
)

// lister is the pair of calls a watch needs; every typed and dynamic client
// for one namespace has it.
type lister[L runtime.Object] interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// selector narrows a watch to the objects a dependency is about: never a
// namespace-wide watch of a whole resource.
type selector struct{ label, field string }

func byName(name string) selector {
	return selector{field: fields.OneTermEqualSelector("metadata.name", name).String()}
}

// newListWatch narrows c by sel and reports API errors through onErr (the
// reflector retries them itself, with backoff; we only make them visible).
func newListWatch[L runtime.Object](c lister[L], sel selector, onErr func(op string, err error)) *cache.ListWatch {
	opts := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector, o.FieldSelector = sel.label, sel.field
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := c.List(ctx, opts(o))
			if err != nil {
				if ctx.Err() == nil {
					onErr("list", err)
				}
				return nil, err
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := c.Watch(ctx, opts(o))
			if err != nil && ctx.Err() == nil {
				onErr("watch", err)
			}
			return wi, err
		},
	}
}

func apiTrouble(report func(Observation)) func(string, error) {
	return func(op string, err error) { report(unhealthy("API %s: %v", op, err)) }
}

// watchUntil lists and watches the objects lw selects and evaluates eval over
// the whole current set once synced and after every change, until the
// observation settles the wait (see watchSet).
func (w *Waiter) watchUntil(ctx context.Context, d Dependency, report func(Observation), lw cache.ListerWatcher, objType runtime.Object, eval func([]any) Observation) error {
	err := watchSet(ctx, lw, objType, w.sleep, func(objs []any) (bool, error) {
		return settle(ctx, d, eval(objs), report)
	})
	if errors.Is(err, errWatchClosed) {
		return fmt.Errorf("watch of %s closed", d)
	}
	return err
}

var errWatchClosed = errors.New("watch closed")

// watchSet lists and watches the objects lw selects (one LIST, then one
// WATCH resumed from the last resourceVersion and re-listed on 410 Gone, by
// client-go's reflector inside an informer) and calls onSet with the whole
// current set once synced and after every change, until it says done:
// level-based, so a missed event cannot leave a caller stuck, and never on a
// half-listed set (which could say "every Job complete" before the last one
// is listed).
//
// This is watchtools.UntilWithSync but for its wait for the initial sync,
// which polls every 100 ms: most of the run time of an agent whose
// dependencies are already met.
func watchSet(ctx context.Context, lw cache.ListerWatcher, objType runtime.Object, sleep func(context.Context, time.Duration) bool, onSet func([]any) (bool, error)) error {
	ctx, cancel := context.WithCancel(ctx) // also ends waitSynced's goroutine
	defer cancel()
	store, informer, watcher, done := watchtools.NewIndexerInformerWatcherWithLogger(klog.FromContext(ctx), lw, objType)
	defer func() {
		watcher.Stop()
		<-done
	}()
	synced := waitSynced(ctx, informer.HasSynced, sleep)
	isSynced := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-synced:
			synced, isSynced = nil, true
		case _, ok := <-watcher.ResultChan():
			if !ok {
				return errWatchClosed
			}
			if !isSynced {
				continue
			}
		}
		if done, err := onSet(store.List()); done {
			return err
		}
	}
}

// waitSynced closes the returned channel once hasSynced is true, looking
// every millisecond at first and backing off to 50 ms.
func waitSynced(ctx context.Context, hasSynced func() bool, sleep func(context.Context, time.Duration) bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		b := wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 50 * time.Millisecond}
		for !hasSynced() {
			if !sleep(ctx, b.Step()) {
				return
			}
		}
		close(ch)
	}()
	return ch
}

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
	return w.watchUntil(ctx, d, report, lw, &unstructured.Unstructured{}, func(objs []any) Observation {
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
	return w.watchUntil(ctx, d, report, lw, &unstructured.Unstructured{}, func(objs []any) Observation {
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
	b := backoff()
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
