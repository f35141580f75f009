package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An API server killed mid-write leaves an event cut off with the next one
// appended on the same line (seen in a CI run): the cut event is lost, the
// rest are read; a line that is not JSON at all is still an error.
func TestRequestsAfterATornEvent(t *testing.T) {
	ev := func(id, user string) string {
		return `{"kind":"Event","auditID":"` + id + `","verb":"get","requestURI":"/api/v1/pods","user":{"username":"` + user + `"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-27T23:58:25.743502Z"}`
	}
	log := filepath.Join(t.TempDir(), "audit.log")
	torn := ev("1", "agent")[:120]
	os.WriteFile(log, []byte(ev("0", "agent")+"\n"+torn+ev("2", "agent")+"\n"+ev("3", "other")+"\n"), 0o644)
	e := &Env{AuditLog: log}
	got, err := e.Requests("agent", time.Time{})
	if err != nil || len(got) != 2 || got[0].ID != "0" && got[1].ID != "0" {
		t.Fatalf("Requests: %v, %+v; want events 0 and 2", err, got)
	}
	os.WriteFile(log, []byte("not json\n"), 0o644)
	if _, err := e.Requests("agent", time.Time{}); err == nil {
		t.Error("a line that is not an event was taken")
	}
}
