package discovery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// waitJobs: the named Job, or every Job with the labels, has the Complete
// condition. A Job that failed ends the wait at once with its reason: it will
// not complete by waiting (kubernetes-entrypoint waits on it forever). sh,
// when not nil, is the wait's shared watch of the namespace's Jobs, which a
// Job named joins.
func (w *Waiter) waitJobs(ctx context.Context, d Dependency, report func(Observation), sh *shared) error {
	ns := w.namespace(d)
	sel := byName(d.Name)
	what := "job " + ns + "/" + d.Name
	if d.Labels != nil {
		sel = selector{label: labels.SelectorFromSet(d.Labels).String()}
		what = "jobs " + ns + "/" + sel.label
	}
	if sh != nil {
		last := lastSeen{report: report}
		err := sh.join(ctx, d.Name, func(objs []any) (bool, error) { return last.settle(ctx, d, jobsObservation(objs, what)) }, apiTrouble(report), last.waiting)
		if !errors.Is(err, errOwnWatch) || ctx.Err() != nil {
			return err
		}
		w.log.Info("the namespace's Jobs may not be listed; watching this one by name", "dependency", d.String())
	}
	lw := newListWatch(w.cfg.Kube.jobs(ns, nil), sel, apiTrouble(report))
	lw.last = true
	return w.watchUntil(ctx, d, report, lw, func(objs []any) Observation {
		return jobsObservation(objs, what)
	})
}

// jobsKind shares the Jobs a wait names in one namespace: one LIST and
// WATCH of the namespace's Jobs (in Table form: a row each, jobtable.go)
// while two or more are waited for, of the one by name once one is left
// (from the watch's next request). A 403 on the first LIST (a Role that
// names its Jobs) sends each back to its own watch by name.
var jobsKind = sharedKind{
	last: true,
	of:   func(u *unstructured.Unstructured) string { return u.GetName() },
	sel: func(keys []string) selector {
		if len(keys) == 1 {
			return byName(keys[0])
		}
		return selector{}
	},
	ended: func(err error, listed bool) error {
		if !listed && apierrors.IsForbidden(err) {
			return errOwnWatch
		}
		return nil
	},
}

func jobsObservation(objs []any, what string) Observation {
	jobs := decodeAll[job](objs)
	if len(jobs) == 0 {
		return waiting("no %s", what)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].Name < jobs[j].Name })
	var pending []string
	for _, j := range jobs {
		if c := jobCondition(j, "Failed"); c != nil {
			return failed("job %s/%s failed: %s: %s", j.Namespace, j.Name, c.Reason, c.Message)
		}
		// FailureTarget is set before the Job controller has finished
		// terminating pods; the outcome is already decided.
		if c := jobCondition(j, "FailureTarget"); c != nil {
			return failed("job %s/%s is failing: %s: %s", j.Namespace, j.Name, c.Reason, c.Message)
		}
		if jobCondition(j, "Complete") == nil {
			if row, ok := j.Annotations[tableRowAnnotation]; ok { // what the API server's table says
				pending = append(pending, fmt.Sprintf("%s (%s)", j.Name, row))
				continue
			}
			pending = append(pending, fmt.Sprintf("%s (active %d, succeeded %d, failed %d)", j.Name, j.Status.Active, j.Status.Succeeded, j.Status.Failed))
		}
	}
	if len(pending) > 0 {
		return waiting("%d of %d not complete: %s", len(pending), len(jobs), strings.Join(first(pending, 5), ", "))
	}
	if len(jobs) == 1 {
		return ready("job %s complete", jobs[0].Name)
	}
	return ready("%d jobs complete", len(jobs))
}

func jobCondition(j *job, t string) *condition {
	for i, c := range j.Status.Conditions {
		if c.Type == t && c.Status == "True" {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}
