package render

import (
	"os"
	"path/filepath"
	"testing"
)

// ReadLive reads what is on disk: data and mode, the owner only where the
// file sets one, and leaves out a file that is not there.
func TestReadLive(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.conf"), filepath.Join(dir, "b.conf")
	if err := os.WriteFile(a, []byte("live"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a, 0o640); err != nil {
		t.Fatal(err)
	}
	want := []File{
		{Path: "/etc/a.conf", Host: a, Data: []byte("wanted"), Mode: 0o600, UID: 12345, GID: 12345},
		{Path: "/etc/b.conf", Host: b, Data: []byte("wanted"), Mode: 0o600, UID: -1, GID: -1},
		{Path: "/etc/a2.conf", Host: a, Data: []byte("wanted"), Mode: 0o600, UID: -1, GID: -1},
	}
	live := ReadLive(want)
	if len(live) != 2 {
		t.Fatalf("%d files read, want 2 (b.conf is not there): %+v", len(live), live)
	}
	if string(live[0].Data) != "live" || live[0].Mode != 0o640 || live[0].UID != os.Getuid() || live[0].GID != os.Getgid() {
		t.Errorf("read %+v, want the disk's data, mode and owner", live[0])
	}
	if live[1].UID != -1 || live[1].GID != -1 {
		t.Errorf("owner %d:%d read for a file that sets none", live[1].UID, live[1].GID)
	}
	if string(want[0].Data) != "wanted" {
		t.Error("ReadLive changed its input")
	}
}
