package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// waitResource: an object of any API type, through the dynamic client, has
// the given field values and conditions.
func (w *Waiter) waitResource(ctx context.Context, d Dependency, report func(Observation)) error {
	r := d.Resource
	gv := schema.GroupVersion{Group: r.Group, Version: r.Version}
	var gvr schema.GroupVersionResource
	var namespaced bool
	// Which resource serves the kind, and whether it is namespaced, is asked of
	// the API's discovery; a CRD installed later is waited for.
	err := w.poll(step(ctx), d, notFinal(report), func(ctx context.Context) Observation {
		list, err := w.cfg.Kube.apiResources(ctx, gv)
		switch {
		case apierrors.IsNotFound(err):
			return waiting("API %s is not served (CRD not installed yet?)", gv)
		case err != nil:
			return unhealthy("API discovery of %s: %v", gv, err)
		}
		for _, res := range list.APIResources {
			match := res.Kind == r.Kind
			if r.Plural != "" {
				match = res.Name == r.Plural
			}
			if match && !strings.Contains(res.Name, "/") {
				gvr, namespaced = gv.WithResource(res.Name), res.Namespaced
				return ready("served")
			}
		}
		if r.Plural != "" {
			return waiting("API %s has no resource %s", gv, r.Plural)
		}
		return waiting("API %s has no kind %s", gv, r.Kind)
	})
	if err != nil {
		return err
	}
	ns, what := "", gvr.Resource+" "+d.Name
	if namespaced {
		ns = w.namespace(d)
		what = gvr.Resource + " " + ns + "/" + d.Name
	}
	lw := newListWatch(w.cfg.Kube.in(gvr, ns), byName(d.Name), apiTrouble(report))
	return w.watchUntil(ctx, d, report, lw, func(objs []any) Observation {
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				return resourceObservation(u, r, what)
			}
		}
		return waiting("%s does not exist", what)
	})
}

func resourceObservation(u *unstructured.Unstructured, r *ResourceRef, what string) Observation {
	var unmet []string
	for _, f := range r.Fields {
		got, found, err := unstructured.NestedFieldNoCopy(u.Object, strings.Split(f.Path, ".")...)
		switch {
		case err != nil || !found:
			unmet = append(unmet, fmt.Sprintf("%s is not set", f.Path))
		case !fieldEquals(got, f.Value):
			unmet = append(unmet, fmt.Sprintf("%s is %s, want %s", f.Path, render(got), f.Value))
		}
	}
	for _, c := range r.Conditions {
		status, ok := conditionStatus(u, c.Type)
		switch {
		case !ok:
			unmet = append(unmet, fmt.Sprintf("condition %s not reported", c.Type))
		case status != c.Status:
			unmet = append(unmet, fmt.Sprintf("condition %s is %s, want %s", c.Type, status, c.Status))
		}
	}
	if len(unmet) > 0 {
		return waiting("%s: %s", what, strings.Join(unmet, "; "))
	}
	return ready("%s matches", what)
}

// fieldEquals compares a field as its own JSON type: "3" equals the number 3
// and 3.0, "true" the boolean true; a string compares as written.
func fieldEquals(got any, want string) bool {
	switch v := got.(type) {
	case string:
		return v == want
	case bool:
		b, err := strconv.ParseBool(want)
		return err == nil && b == v
	case int64:
		if n, err := strconv.ParseInt(want, 10, 64); err == nil {
			return n == v
		}
		f, err := strconv.ParseFloat(want, 64)
		return err == nil && f == float64(v)
	case float64:
		f, err := strconv.ParseFloat(want, 64)
		return err == nil && f == v
	case nil:
		return want == "null"
	}
	// Objects and lists: compare their JSON encoding.
	return render(got) == want
}

func render(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func conditionStatus(u *unstructured.Unstructured, typ string) (string, bool) {
	conds, found, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil || !found {
		return "", false
	}
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		s, _ := m["status"].(string)
		return s, true
	}
	return "", false
}
