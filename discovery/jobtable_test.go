package discovery

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// tableServer answers the Jobs of namespace ns: in Table form (with or
// without the Status column) when asked for it, as JSON otherwise, and
// records what it was asked.
type tableServer struct {
	statusColumn bool
	mu           sync.Mutex
	asked        []string
}

var jobCells = [][]any{
	{"db-sync", "Complete", "1/1", "12s", "5m"},
	{"fernet-setup", "Running", "0/1", "5m", "5m"},
	{"credential-setup", "Failed", "0/1", "5m", "5m"},
}

func (s *tableServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	table := strings.Contains(r.Header.Get("Accept"), "as=Table")
	s.mu.Lock()
	kind := "json"
	if table {
		kind = "table"
	}
	s.asked = append(s.asked, kind+" "+r.URL.Path+"?"+r.URL.RawQuery)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !table {
		job := func(name, cond, reason string) map[string]any {
			j := map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": name, "namespace": "ns", "resourceVersion": "7"}}
			if cond != "" {
				j["status"] = map[string]any{"conditions": []any{map[string]any{"type": cond, "status": "True", "reason": reason, "message": "pod failed 3 times"}}}
			}
			return j
		}
		if name, ok := strings.CutPrefix(r.URL.Path, "/apis/batch/v1/namespaces/ns/jobs/"); ok {
			json.NewEncoder(w).Encode(job(name, "Failed", "BackoffLimitExceeded"))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"apiVersion": "batch/v1", "kind": "JobList", "metadata": map[string]any{"resourceVersion": "9"},
			"items": []any{job("db-sync", "Complete", "")}})
		return
	}
	cols := []metav1.TableColumnDefinition{{Name: "Name"}, {Name: "Status"}, {Name: "Completions"}, {Name: "Duration"}, {Name: "Age"}}
	if !s.statusColumn {
		cols = slices.Delete(cols, 1, 2)
	}
	tab := func(rows [][]any, withCols bool) metav1.Table {
		t := metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
		if withCols {
			t.ColumnDefinitions = cols
		}
		for _, c := range rows {
			if !s.statusColumn {
				c = append([]any{c[0]}, c[2:]...)
			}
			t.Rows = append(t.Rows, metav1.TableRow{Cells: c})
		}
		return t
	}
	if r.URL.Query().Get("watch") != "true" {
		json.NewEncoder(w).Encode(tab(jobCells, true))
		return
	}
	enc := json.NewEncoder(w)
	first := tab(jobCells[1:2], true)
	first.ResourceVersion = "11"
	enc.Encode(map[string]any{"type": "MODIFIED", "object": first})
	bm := tab([][]any{{"", "Running", "", "", ""}}, false)
	bm.ResourceVersion = "12"
	enc.Encode(map[string]any{"type": "BOOKMARK", "object": bm})
	done := tab([][]any{{"fernet-setup", "Complete", "1/1", "6m", "6m"}}, false)
	done.ResourceVersion = "13"
	enc.Encode(map[string]any{"type": "MODIFIED", "object": done})
	enc.Encode(map[string]any{"type": "ERROR", "object": metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}})
}

func (s *tableServer) requests() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.asked, "\n")
}

func tableKube(t *testing.T, s *tableServer) *Kube {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	k, err := NewKube(&rest.Config{Host: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A LIST in Table form: each row a Job with its condition and, for the one
// that failed, the whole Job (one GET), whose reason the wait reports.
func TestJobTableList(t *testing.T) {
	s := &tableServer{statusColumn: true}
	l := tableKube(t, s).jobs("ns", nil)
	list, err := l.List(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=x"})
	if err != nil {
		t.Fatal(err)
	}
	if list.GetResourceVersion() != "10" || len(list.Items) != 3 {
		t.Fatalf("list: rv %q, %d items", list.GetResourceVersion(), len(list.Items))
	}
	var objs []any
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	o := jobsObservation(objs[:2], "jobs")
	if o.State != Waiting || o.Detail != "1 of 2 not complete: fernet-setup (Running, 0/1 complete)" {
		t.Errorf("observation %+v", o)
	}
	if o := jobsObservation(objs, "jobs"); o.State != Failed || !strings.Contains(o.Detail, "credential-setup failed: BackoffLimitExceeded: pod failed 3 times") {
		t.Errorf("observation %+v", o)
	}
	want := "table /apis/batch/v1/namespaces/ns/jobs?fieldSelector=metadata.name%3Dx&includeObject=None\n" +
		"json /apis/batch/v1/namespaces/ns/jobs/credential-setup?"
	if got := s.requests(); got != want {
		t.Errorf("requests:\n%s\nwant:\n%s", got, want)
	}
}

// A WATCH in Table form: the first event carries the columns, later ones
// do not; a bookmark is a resourceVersion, not a Job; an ERROR is the
// API's status, which watchSet reads (410: re-list).
func TestJobTableWatch(t *testing.T) {
	s := &tableServer{statusColumn: true}
	l := tableKube(t, s).jobs("ns", nil)
	w, err := l.Watch(context.Background(), metav1.ListOptions{ResourceVersion: "10", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for ev := range w.ResultChan() {
		switch o := ev.Object.(type) {
		case *unstructured.Unstructured:
			got = append(got, string(ev.Type)+" "+o.GetName()+" "+o.GetResourceVersion()+" "+o.GetAnnotations()[tableRowAnnotation])
		case *metav1.Status:
			got = append(got, string(ev.Type)+" "+string(o.Reason))
		}
		if ev.Type == watch.Error {
			break
		}
	}
	want := "MODIFIED fernet-setup 11 Running, 0/1 complete|BOOKMARK  12 |MODIFIED fernet-setup 13 Complete, 1/1 complete|ERROR Expired"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("events:\n%s\nwant:\n%s", g, want)
	}
	if !strings.Contains(s.requests(), "watch=true") || !strings.Contains(s.requests(), "allowWatchBookmarks=true") {
		t.Errorf("requests: %s", s.requests())
	}
}

// A server whose table has no Status column (before 1.30): the Jobs are
// read whole from then on, the LIST that found out answered as JSON.
func TestJobTableWithoutStatusColumn(t *testing.T) {
	s := &tableServer{}
	l := tableKube(t, s).jobs("ns", nil)
	for range 2 {
		list, err := l.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != "db-sync" || list.GetResourceVersion() != "9" {
			t.Fatalf("list %+v", list)
		}
	}
	want := "table /apis/batch/v1/namespaces/ns/jobs?includeObject=None\n" +
		"json /apis/batch/v1/namespaces/ns/jobs?\n" +
		"json /apis/batch/v1/namespaces/ns/jobs?"
	if got := s.requests(); got != want {
		t.Errorf("requests:\n%s\nwant:\n%s", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wi, err := l.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wi.Stop()
	for range wi.ResultChan() {
	}
	if last := s.requests()[strings.LastIndexByte(s.requests(), '\n')+1:]; !strings.HasPrefix(last, "json ") {
		t.Errorf("the watch: %s", last)
	}
}
