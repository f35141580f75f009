package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/retry"
)

// ErrInvalid: the Job's template is not a Job the API accepts. Bad input,
// not a reason to wait.
var ErrInvalid = errors.New("invalid bootstrap job")

// CheckJob builds the step's first Job without sending it: a bad template
// is reported before anything is written.
func (c *Coordinator) CheckJob(spec JobSpec, s Step) error {
	_, err := c.job(spec, s, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// Create runs a step in create mode. A recorded step is done at once (one
// GET). Otherwise every replica tries to create the step's Job, whose name
// is the content hash: one succeeds, the others get AlreadyExists, and all
// watch the step's Jobs (by label, one list+watch) until one completes. A
// failed Job is replaced up to retries times (a suffix in the name: every
// replica tries, one succeeds); past them the step has failed, and the
// replica stays until ctx ends (the timeout), then returns ErrFailed. A Job
// deleted before anyone recorded it, failed or not, is created again. The
// first replica to see the success records it.
func (c *Coordinator) Create(ctx context.Context, s Step, spec JobSpec, retries int) error {
	if done, err := c.fromRecord(ctx, s); done || err != nil {
		return err
	}
	if err := c.createJob(ctx, spec, s, 0); err != nil {
		return err
	}
	jobs := c.cfg.Kube.Observe(ctx, jobsGVR, c.cfg.Namespace, discovery.Selector{Labels: c.labels(s)}, c.apiTrouble(s))
	last := "no job seen yet"
	highest := 0 // the newest attempt seen: recreated if every Job goes
	failed := "" // the step failed past its retries: why
	said := ""   // and what its pod said
	for {
		var set []*unstructured.Unstructured
		select {
		case <-ctx.Done():
			if failed != "" {
				return fmt.Errorf("%w: %s%s", ErrFailed, failed, said)
			}
			return timedOut(ctx, s, last)
		case set = <-jobs.Next():
		}
		v := decide(set)
		if v.latest != nil {
			highest = max(highest, attempt(v.latest))
		}
		switch {
		case v.succeeded != nil:
			j := v.succeeded
			e, mine, err := c.record(ctx, s, Entry{Job: j.Name, UID: string(j.UID)})
			if err != nil {
				c.log.Warn("the step is done but could not be recorded", "step", s.String(), "error", err.Error())
			} else if mine {
				c.log.Info("bootstrap recorded", "step", s.String(), "job", e.Job, "record", RecordName(c.cfg.Name))
			}
			c.report(s, Done, "", "job %s complete", j.Name)
			return nil
		case v.latest == nil:
			// No Job: never created (our create raced a deletion) or
			// deleted: by its TTL, or by an operator who fixed what
			// failed. Another replica may have recorded the success
			// before it went.
			if done, err := c.fromRecord(ctx, s); done || err != nil {
				return err
			}
			failed = ""
			last = "job " + JobName(c.cfg.Name, s, highest) + " is gone and no success is recorded: creating it again"
			c.report(s, Waiting, "", "%s", last)
			if err := c.createJob(ctx, spec, s, highest); err != nil {
				return err
			}
		case v.failed != "":
			j := v.latest
			if attempt(j) >= retries {
				// Stay, not ready and saying why, until the timeout: a
				// crash loop would only run the same failure again, and
				// an operator who deletes the failed Job gets a new one.
				if failed != v.failed {
					failed, said = v.failed, ""
					if m := c.podSaid(ctx, j.Name); m != "" {
						said = "; its pod said: " + m
					}
					c.report(s, Failed, "BootstrapJobFailed", "%s (delete the job to run it again)%s", v.failed, said)
				}
				continue
			}
			next := attempt(j) + 1
			last = fmt.Sprintf("%s; retrying as %s (retry %d of %d)", v.failed, JobName(c.cfg.Name, s, next), next, retries)
			c.report(s, Waiting, "", "%s", last)
			if err := c.createJob(ctx, spec, s, next); err != nil {
				return err
			}
		default:
			failed = ""
			last = v.waiting
			c.report(s, Waiting, "", "%s", last)
		}
	}
}

// podSaid is the termination message of the newest failed container of a
// Job's pods: the bootstrap command's last output, as `kolla-agent
// bootstrap` writes it, which says why where the Job's condition only says
// that it failed. One LIST, only when a failure is first seen; "" when
// there is none or the pods cannot be listed (the Role may not allow it).
func (c *Coordinator) podSaid(ctx context.Context, job string) string {
	l, err := c.cfg.Kube.Resource(podsGVR, c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		c.log.Debug("the failed job's pods cannot be listed", "job", job, "error", err.Error())
		return ""
	}
	var msg string
	var at time.Time
	for _, u := range l.Items {
		var p struct {
			Status struct {
				ContainerStatuses []struct {
					State struct {
						Terminated *struct {
							ExitCode   int32     `json:"exitCode"`
							Message    string    `json:"message"`
							FinishedAt time.Time `json:"finishedAt"`
						} `json:"terminated"`
					} `json:"state"`
				} `json:"containerStatuses"`
			} `json:"status"`
		}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && t.Message != "" && !t.FinishedAt.Before(at) {
				msg, at = strings.TrimSpace(t.Message), t.FinishedAt
			}
		}
	}
	return msg
}

// Recorded reads the record (one GET) and says whether the step is done.
func (c *Coordinator) Recorded(ctx context.Context, s Step) (bool, error) {
	e, err := c.recorded(ctx, s)
	return e != nil, err
}

// fromRecord reports a recorded step done. An unreadable record is not
// fatal: the Jobs decide.
func (c *Coordinator) fromRecord(ctx context.Context, s Step) (bool, error) {
	e, err := c.recorded(ctx, s)
	switch {
	case ctx.Err() != nil:
		return true, timedOut(ctx, s, "reading the record")
	case err != nil:
		c.log.Warn("could not read the bootstrap record; looking at the Jobs", "record", RecordName(c.cfg.Name), "error", err.Error())
		return false, nil
	case e == nil:
		return false, nil
	}
	by := "job " + e.Job
	if e.Holder != "" {
		by = "pod " + e.Holder
	}
	c.report(s, Done, "", "recorded in configmap %s: done by %s at %s", RecordName(c.cfg.Name), by, e.Finished)
	return true, nil
}

// createJob creates one attempt's Job. AlreadyExists means another replica
// did: fine. An invalid Job is bad input; other errors (forbidden, API
// down) are retried with backoff until ctx ends, reported each time.
func (c *Coordinator) createJob(ctx context.Context, spec JobSpec, s Step, attempt int) error {
	j, err := c.job(spec, s, attempt)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	bo := retry.Step()
	for {
		_, err := c.cfg.Kube.Resource(jobsGVR, c.cfg.Namespace).Create(ctx, j, metav1.CreateOptions{})
		switch {
		case err == nil:
			c.log.Info("created the bootstrap job", "job", j.GetName(), "step", s.String())
			c.report(s, Waiting, "BootstrapJobCreated", "created job %s", j.GetName())
			return nil
		case apierrors.IsAlreadyExists(err):
			return nil
		case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
			return fmt.Errorf("%w: %s: %v", ErrInvalid, spec.Source, err)
		}
		if apierrors.IsForbidden(err) { // retried: a RoleBinding may come a moment after the pod
			err = fmt.Errorf("%v; the pod's Role needs {apiGroups: [batch], resources: [jobs], verbs: [create]} (examples/rbac/bootstrap-create.yaml)", err)
		}
		c.report(s, Waiting, "", "cannot create job %s: %v", j.GetName(), err)
		if !retry.Sleep(ctx, nil, bo.Step()) {
			return timedOut(ctx, s, fmt.Sprintf("cannot create job %s: %v", j.GetName(), err))
		}
	}
}

func (c *Coordinator) apiTrouble(s Step) func(string, error) {
	return func(op string, err error) { c.report(s, Waiting, "", "API %s of jobs: %v", op, err) }
}

// jobView is what decide reads of a Job.
type jobView struct {
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason,omitempty"`
			Message string `json:"message,omitempty"`
		} `json:"conditions,omitempty"`
		Active    int32 `json:"active,omitempty"`
		Succeeded int32 `json:"succeeded,omitempty"`
		Failed    int32 `json:"failed,omitempty"`
	} `json:"status"`
}

func (j *jobView) condition(t string) (reason, message string, ok bool) {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == "True" {
			return c.Reason, c.Message, true
		}
	}
	return "", "", false
}

func attempt(j *jobView) int {
	n, _ := strconv.Atoi(j.Labels[LabelAttempt])
	return n
}

// verdict is what a set of one step's Jobs says.
type verdict struct {
	succeeded *jobView // a Job that completed
	latest    *jobView // the newest attempt; nil when there is no Job
	failed    string   // the newest attempt failed, and why
	waiting   string   // else: what is running
}

// decide reads the step's Jobs. Complete and SuccessCriteriaMet both mean
// success (the latter comes first since Kubernetes 1.31, before the pods
// have terminated); Failed and FailureTarget both mean failure, decided.
func decide(set []*unstructured.Unstructured) verdict {
	var jobs []*jobView
	for _, u := range set {
		var j jobView
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &j); err == nil {
			jobs = append(jobs, &j)
		}
	}
	sort.Slice(jobs, func(a, b int) bool { return attempt(jobs[a]) < attempt(jobs[b]) })
	var v verdict
	for _, j := range jobs {
		if _, _, ok := j.condition("Complete"); ok {
			v.succeeded = j
		} else if _, _, ok := j.condition("SuccessCriteriaMet"); ok && v.succeeded == nil {
			v.succeeded = j
		}
	}
	if len(jobs) == 0 {
		return v
	}
	j := jobs[len(jobs)-1]
	v.latest = j
	for _, t := range []string{"Failed", "FailureTarget"} {
		if reason, msg, ok := j.condition(t); ok {
			v.failed = fmt.Sprintf("job %s failed: %s: %s", j.Name, reason, msg)
			return v
		}
	}
	v.waiting = fmt.Sprintf("waiting for job %s (active %d, failed %d)", j.Name, j.Status.Active, j.Status.Failed)
	if j.DeletionTimestamp != nil {
		v.waiting = fmt.Sprintf("job %s is being deleted", j.Name)
	}
	return v
}
