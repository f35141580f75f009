package probes

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// On a fake /proc: the children of 10 are its workers; a worker whose PID
// now belongs to a process started later, or that is a zombie, is gone.
func TestWorkers(t *testing.T) {
	root := t.TempDir()
	lcFakeProc(t, root, 10, 1, 100, 'S', "uwsgi")
	lcFakeProc(t, root, 11, 10, 110, 'S', "uwsgi")
	lcFakeProc(t, root, 12, 10, 120, 'S', "uwsgi")
	lcFakeProc(t, root, 13, 11, 130, 'S', "helper") // a grandchild
	lcFakeProc(t, root, 14, 10, 140, 'Z', "uwsgi")  // exited, not reaped
	w := WorkersOf(root, 10)
	if len(w) != 2 || w[11] != 110 || w[12] != 120 {
		t.Fatalf("workers of 10: %v", w)
	}
	if w.Gone(root) {
		t.Fatal("gone while both run")
	}
	os.RemoveAll(filepath.Join(root, "11"))
	if w.Gone(root) {
		t.Fatal("gone while 12 runs")
	}
	lcFakeProc(t, root, 12, 10, 999, 'S', "uwsgi") // PID 12 reused
	if !w.Gone(root) {
		t.Fatal("not gone after both were replaced")
	}
	lcFakeProc(t, root, 12, 10, 120, 'Z', "uwsgi")
	if !w.Gone(root) {
		t.Fatal("a zombie counted as a worker")
	}
	if n := len(WorkersOf(root, 13)); n != 0 {
		t.Fatalf("%d workers of a process with none", n)
	}
	if n := len(WorkersOf(filepath.Join(root, strconv.Itoa(404)), 10)); n != 0 {
		t.Fatalf("%d workers under a missing /proc", n)
	}
}
