package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// tableAccept asks the API server for its Table form of a list or watch,
// the one kubectl prints from.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// jobTable lists and watches a namespace's Jobs in the API server's Table
// form without the objects (includeObject=None): a Job is a row of the
// columns kubectl prints, its name, its Status (Complete, Failed, Running,
// ...) and its completions, about 200 bytes where its JSON is 6-8 KB
// (helm-toolkit's Jobs carry their pod template and managedFields). Only a
// Job that failed is read whole, with one GET, for its reason. A server
// whose Table has no Status column (before Kubernetes 1.30) is read whole
// from then on, as the other resources are (full).
type jobTable struct {
	k    *Kube
	ns   string
	full lister // the JSON objects: GETs, and a server without the column
	// wants says which failed Jobs are worth a GET (nil: all): a list of
	// the namespace's Jobs has others' failed ones too.
	wants func(name string) bool
	whole atomic.Bool
	once  sync.Once
}

// tableRowAnnotation carries, on a Job made from a Table row, what the row
// says (its Status and completions), for the waiting detail: a row has no
// counts of active or failed pods.
const tableRowAnnotation = "kolla-agent.io/table-row"

func (k *Kube) jobTable(ns string, wants func(string) bool) *jobTable {
	return &jobTable{k: k, ns: ns, full: k.dynamic.Resource(jobsGVR).Namespace(ns), wants: wants}
}

func (t *jobTable) Get(ctx context.Context, name string, o metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	return t.full.Get(ctx, name, o, sub...)
}

func (t *jobTable) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	if t.whole.Load() {
		return t.full.List(ctx, o)
	}
	resp, err := t.request(ctx, o, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var tab metav1.Table
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&tab); err != nil {
		return nil, fmt.Errorf("decoding the Jobs' table: %w", err)
	}
	cols, ok := jobColumns(tab.ColumnDefinitions)
	if !ok {
		t.readWhole()
		return t.full.List(ctx, o)
	}
	out := &unstructured.UnstructuredList{}
	out.SetResourceVersion(tab.ResourceVersion)
	for _, row := range tab.Rows {
		out.Items = append(out.Items, *t.object(ctx, cols, row, ""))
	}
	return out, nil
}

func (t *jobTable) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if t.whole.Load() {
		return t.full.Watch(ctx, o)
	}
	wctx, cancel := context.WithCancel(ctx)
	resp, err := t.request(wctx, o, true)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &tableWatch{ch: make(chan watch.Event), cancel: cancel}
	go w.run(wctx, t, resp.Body)
	return w, nil
}

// readWhole switches to the JSON objects, saying so once.
func (t *jobTable) readWhole() {
	t.whole.Store(true)
	t.once.Do(func() {
		t.k.log.Info("the API server's table of Jobs has no Status column (Kubernetes before 1.30): reading whole Jobs", "namespace", t.ns)
	})
}

// request sends a LIST or WATCH in Table form; an answer other than 200 is
// the API's error, as the dynamic client gives it.
func (t *jobTable) request(ctx context.Context, o metav1.ListOptions, watching bool) (*http.Response, error) {
	q := url.Values{"includeObject": {"None"}}
	for k, v := range map[string]string{"labelSelector": o.LabelSelector, "fieldSelector": o.FieldSelector, "resourceVersion": o.ResourceVersion} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if watching {
		q.Set("watch", "true")
		if o.AllowWatchBookmarks {
			q.Set("allowWatchBookmarks", "true")
		}
		if o.TimeoutSeconds != nil {
			q.Set("timeoutSeconds", strconv.FormatInt(*o.TimeoutSeconds, 10))
		}
	}
	path := "/apis/batch/v1/namespaces/" + url.PathEscape(t.ns) + "/jobs"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.k.host+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", tableAccept)
	resp, err := t.k.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		return nil, &apierrors.StatusError{ErrStatus: st}
	}
	verb := "list"
	if watching {
		verb = "watch"
	}
	return nil, apierrors.NewGenericServerResponse(resp.StatusCode, verb, jobsGVR.GroupResource(), "", strings.TrimSpace(string(body)), 0, false)
}

// jobCols are the indexes of the cells a Job's wait reads.
type jobCols struct{ name, status, completions int }

func jobColumns(defs []metav1.TableColumnDefinition) (jobCols, bool) {
	c := jobCols{-1, -1, -1}
	for i, d := range defs {
		switch d.Name {
		case "Name":
			c.name = i
		case "Status":
			c.status = i
		case "Completions":
			c.completions = i
		}
	}
	return c, c.name >= 0 && c.status >= 0 && c.completions >= 0
}

func cell(row metav1.TableRow, i int) string {
	if i < len(row.Cells) {
		if s, ok := row.Cells[i].(string); ok {
			return s
		}
	}
	return ""
}

// object makes the Job a row says: its name, its condition (the Status
// column names the condition that is true: Complete, Failed,
// FailureTarget, ...), its succeeded count, and resourceVersion rv (a
// watch event's) or, in a list, a digest of the row, which changes when
// the row does. A failed Job is read whole for its reason and message;
// should that GET fail, the row is all there is.
func (t *jobTable) object(ctx context.Context, c jobCols, row metav1.TableRow, rv string) *unstructured.Unstructured {
	name, status, completions := cell(row, c.name), cell(row, c.status), cell(row, c.completions)
	var why string
	if (status == "Failed" || status == "FailureTarget") && (t.wants == nil || t.wants(name)) {
		u, err := t.full.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return u
		}
		why = "its reason not read: " + err.Error()
	}
	if rv == "" {
		h := fnv.New64a()
		for _, x := range row.Cells {
			fmt.Fprintf(h, "%v\x00", x)
		}
		rv = "row-" + strconv.FormatUint(h.Sum64(), 36)
	}
	var conds []any
	switch status {
	case "Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended":
		conds = []any{map[string]any{"type": status, "status": "True", "reason": status, "message": why}}
	}
	succeeded, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(completions, "/", 2)[0]), 10, 32)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"status": map[string]any{"conditions": conds, "succeeded": succeeded},
	}}
	u.SetName(name)
	u.SetNamespace(t.ns)
	u.SetResourceVersion(rv)
	u.SetAnnotations(map[string]string{tableRowAnnotation: status + ", " + completions + " complete"})
	return u
}

// tableWatch turns a watch's stream of Table events into Job events. Only
// the first event of a stream carries the column definitions.
type tableWatch struct {
	ch     chan watch.Event
	cancel context.CancelFunc
}

func (w *tableWatch) Stop()                          { w.cancel() }
func (w *tableWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *tableWatch) run(ctx context.Context, t *jobTable, body io.ReadCloser) {
	defer close(w.ch)
	defer body.Close()
	send := func(e watch.Event) bool {
		select {
		case w.ch <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	fail := func(format string, args ...any) {
		send(watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(fmt.Errorf(format, args...)).ErrStatus})
	}
	dec := json.NewDecoder(body)
	var cols *jobCols
	for {
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return // the server ended the watch, or Stop
		}
		if ev.Type == watch.Error {
			var st metav1.Status
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				fail("a watch error not understood: %v", err)
				return
			}
			if !send(watch.Event{Type: watch.Error, Object: &st}) {
				return
			}
			continue
		}
		var tab metav1.Table
		if err := json.Unmarshal(ev.Object, &tab); err != nil {
			fail("decoding a Jobs' table event: %v", err)
			return
		}
		if len(tab.ColumnDefinitions) > 0 {
			c, ok := jobColumns(tab.ColumnDefinitions)
			if !ok {
				fail("the Jobs' table has no Status column")
				return
			}
			cols = &c
		}
		if ev.Type == watch.Bookmark {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job"}}
			u.SetResourceVersion(tab.ResourceVersion)
			if !send(watch.Event{Type: watch.Bookmark, Object: u}) {
				return
			}
			continue
		}
		if cols == nil {
			fail("a Jobs' table event before the columns")
			return
		}
		for _, row := range tab.Rows {
			if !send(watch.Event{Type: ev.Type, Object: t.object(ctx, *cols, row, tab.ResourceVersion)}) {
				return
			}
		}
	}
}
