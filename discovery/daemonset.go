package discovery

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitDaemonSet: the DaemonSet's pod on the agent's node is Ready. First the
// DaemonSet must exist and its controller must have processed its current
// generation (so the pods it wants exist; its selector and UID say which pods
// are its own); then its pods are watched, and the one for this node decides.
func (w *Waiter) waitDaemonSet(ctx context.Context, d Dependency, report func(Observation)) error {
	ns := w.namespace(d)
	var ds *daemonSet
	lw := newListWatch(w.cfg.Kube.in(daemonSetsGVR, ns), byName(d.Name), apiTrouble(report))
	err := w.watchUntil(step(ctx), d, notFinal(report), lw, func(objs []any) Observation {
		for _, x := range decodeAll[daemonSet](objs) {
			if x.Status.ObservedGeneration < x.Generation {
				return waiting("daemonset %s/%s: generation %d not yet processed by its controller", ns, d.Name, x.Generation)
			}
			ds = x
			return ready("exists")
		}
		return waiting("daemonset %s/%s does not exist", ns, d.Name)
	})
	if err != nil {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return fmt.Errorf("%w: %s: daemonset selector: %v", ErrFailed, d, err)
	}
	node, err := w.nodeName(ctx, report)
	if err != nil {
		return err
	}
	// By label, not spec.nodeName: a DaemonSet pod exists before the scheduler
	// binds it, targeted at its node by node affinity, and a field selector on
	// nodeName would miss it and count the node as having no pod.
	lw = newListWatch(w.cfg.Kube.in(podsGVR, ns), selector{label: sel.String()}, apiTrouble(report))
	return w.watchUntil(ctx, d, report, lw, func(objs []any) Observation {
		return daemonPodObservation(ds, podsOf(objs), node)
	})
}

func daemonPodObservation(ds *daemonSet, pods []*pod, node string) Observation {
	var own []*pod
	for _, p := range pods {
		if metav1.IsControlledBy(p, ds) && targetNode(p) == node {
			own = append(own, p)
		}
	}
	if len(own) == 0 {
		// kubernetes-entrypoint's rule: a DaemonSet with no pod on this node
		// does not hold the pod back (the node may be excluded by a selector).
		return ready("no pod of daemonset %s/%s on node %s: counted as satisfied, as kubernetes-entrypoint does", ds.Namespace, ds.Name, node)
	}
	return podsObservation(own, " on node "+node)
}

// targetNode is the node a DaemonSet pod is for: where it is bound, or, before
// that, the node its required node affinity names (the DaemonSet controller
// targets each pod with a metadata.name matchFields term).
func targetNode(p *pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.Required.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == metav1.ObjectNameField && f.Operator == "In" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}
