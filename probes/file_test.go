package probes

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFileCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heartbeat")
	c := NewFile(path, time.Minute)
	if _, err := lcCheck(t, c); err == nil || err.Error() != path+": missing" {
		t.Fatalf("got %v, want %s: missing", err, path)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Now().Add(-10 * time.Second)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		now     time.Time
		detail  string
		wantErr string
	}{
		{"fresh", mtime.Add(10 * time.Second), "modified 10s ago", ""},
		{"future", mtime.Add(-5 * time.Second), "modified 0s ago", ""},
		{"stale", mtime.Add(95*time.Second + 300*time.Millisecond), "", path + ": last modified 95s ago (max 60s)"},
		{"exactly max", mtime.Add(time.Minute), "", path + ": last modified 60s ago (max 60s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.now = func() time.Time { return tc.now }
			detail, err := lcCheck(t, c)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("got (%q, %v), want %q", detail, err, tc.wantErr)
				}
				return
			}
			if err != nil || detail != tc.detail {
				t.Fatalf("got (%q, %v), want %q", detail, err, tc.detail)
			}
		})
	}
	// Sub-second ages are not shown as "0s".
	if got := heartbeatAge(250 * time.Millisecond); got != "250ms" {
		t.Fatalf("heartbeatAge(250ms) = %q", got)
	}
}
