package probes

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lcName returns a process name no other process on the machine has (other
// test runs share it), with the given prefix.
func lcName(prefix string) string {
	return fmt.Sprintf("%s%06d", prefix, rand.IntN(1000000))
}

// lcLink makes dir/name a symlink to the test binary: a process started
// through it has comm name (truncated to 15 bytes), its exe is the binary.
func lcLink(t *testing.T, name string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// lcFinder returns a finder with a clock the test moves.
func lcFinder(t *testing.T, cfg FinderConfig) (*Finder, *time.Time) {
	t.Helper()
	f, err := NewFinder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	return f, &now
}

func TestFinderByName(t *testing.T) {
	t.Run("comm", func(t *testing.T) {
		name := lcName("kf-comm-")
		h := lcStartHelper(t, lcLink(t, name), "argv0-is-not-it")
		f, _ := lcFinder(t, FinderConfig{Name: name})
		if got := f.PID(); got != h.pid {
			t.Fatalf("PID() = %d, want %d", got, h.pid)
		}
		if f.Describe() != "name="+name {
			t.Fatalf("Describe() = %q", f.Describe())
		}
	})
	t.Run("comm truncated", func(t *testing.T) {
		name := lcName("kolla-finder-long-name-")
		h := lcStartHelper(t, lcLink(t, name), "argv0-is-not-it")
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", h.pid))
		if err != nil || strings.TrimSpace(string(comm)) != name[:15] {
			t.Fatalf("comm %q, %v: want %q", comm, err, name[:15])
		}
		f, _ := lcFinder(t, FinderConfig{Name: name})
		if got := f.PID(); got != h.pid {
			t.Fatalf("PID() = %d, want %d", got, h.pid)
		}
	})
	t.Run("argv0", func(t *testing.T) {
		name := lcName("kf-argv0-")
		h := lcStartHelper(t, "", "/opt/kolla/bin/"+name)
		f, _ := lcFinder(t, FinderConfig{Name: name})
		if got := f.PID(); got != h.pid {
			t.Fatalf("PID() = %d, want %d", got, h.pid)
		}
	})
	t.Run("exe", func(t *testing.T) {
		// exe is the file executed, links resolved: a copy under the name,
		// started through a symlink of another name with another argv[0].
		name := lcName("kf-exe-")
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		copied := filepath.Join(t.TempDir(), name)
		lcCopyFile(t, exe, copied)
		link := filepath.Join(t.TempDir(), "other-name")
		if err := os.Symlink(copied, link); err != nil {
			t.Fatal(err)
		}
		h := lcStartHelper(t, link, "argv0-is-not-it")
		f, _ := lcFinder(t, FinderConfig{Name: name})
		if got := f.PID(); got != h.pid {
			t.Fatalf("PID() = %d, want %d", got, h.pid)
		}
	})
	t.Run("none", func(t *testing.T) {
		f, _ := lcFinder(t, FinderConfig{Name: lcName("kf-nothing-")})
		if got := f.PID(); got != 0 {
			t.Fatalf("PID() = %d, want 0", got)
		}
	})
}

func lcCopyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFinderByCmdline(t *testing.T) {
	marker := lcName("marker")
	h := lcStartHelper(t, "", "/usr/bin/keystone-wsgi-public", "--port", "5000", "--"+marker)
	f, _ := lcFinder(t, FinderConfig{Cmdline: `^\S*keystone-wsgi-public --port 5000 --` + marker + `$`})
	if got := f.PID(); got != h.pid {
		t.Fatalf("PID() = %d, want %d", got, h.pid)
	}
	f, _ = lcFinder(t, FinderConfig{Cmdline: `keystone-wsgi-public --port 5001 --` + marker})
	if got := f.PID(); got != 0 {
		t.Fatalf("PID() = %d for another port, want 0", got)
	}
}

func TestFinderByPIDFile(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(root, "run", "svc.pid")
	f, _ := lcFinder(t, FinderConfig{PIDFile: "/run/svc.pid", Root: root})
	if f.Describe() != "pidfile=/run/svc.pid" {
		t.Fatalf("Describe() = %q", f.Describe())
	}
	if got := f.PID(); got != 0 {
		t.Fatalf("PID() = %d without a pid file, want 0", got)
	}
	h := lcStartHelper(t, "", "svc")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(pidFile, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(strconv.Itoa(h.pid) + "\n")
	if got := f.PID(); got != h.pid {
		t.Fatalf("PID() = %d, want %d", got, h.pid)
	}
	for _, bad := range []string{"", "x", "-1", strconv.Itoa(lcGoneProcess(t))} {
		write(bad)
		if got := f.PID(); got != 0 {
			t.Fatalf("PID() = %d with pid file %q, want 0", got, bad)
		}
	}
	h2 := lcStartHelper(t, "", "svc")
	write(strconv.Itoa(h2.pid))
	if got := f.PID(); got != h2.pid || f.Restarts() != 1 {
		t.Fatalf("PID() = %d, restarts %d; want %d, 1", got, f.Restarts(), h2.pid)
	}
}

// TestFinderParentOverChild: a master and its worker share a name; the
// master is the service.
func TestFinderParentOverChild(t *testing.T) {
	name := lcName("kf-tree-")
	link := lcLink(t, name)
	h := lcStartHelper(t, link, link, "-child")
	if h.child == 0 {
		t.Fatal("no child")
	}
	for _, cfg := range []FinderConfig{{Name: name}, {Cmdline: name}} {
		f, _ := lcFinder(t, cfg)
		if got := f.PID(); got != h.pid {
			t.Fatalf("%s: PID() = %d, want the parent %d (child %d)", f.Describe(), got, h.pid, h.child)
		}
	}
}

// TestFinderRestart: the process dies and comes back with another pid; the
// finder rescans no more than every finderScanEvery.
func TestFinderRestart(t *testing.T) {
	name := lcName("kf-restart-")
	link := lcLink(t, name)
	// An older zombie of the same name must not be taken for the service.
	zombie := lcZombie(t, link, name)

	f, now := lcFinder(t, FinderConfig{Name: name})
	h1 := lcStartHelper(t, link, name)
	if got := f.PID(); got != h1.pid {
		t.Fatalf("PID() = %d, want %d (zombie %d)", got, h1.pid, zombie)
	}
	h1.kill()
	if got := f.PID(); got != 0 {
		t.Fatalf("PID() = %d after the kill, want 0", got)
	}
	h2 := lcStartHelper(t, link, name)
	if got := f.PID(); got != 0 {
		t.Fatalf("PID() = %d: rescanned within %v", got, finderScanEvery)
	}
	*now = now.Add(finderScanEvery)
	if got := f.PID(); got != h2.pid {
		t.Fatalf("PID() = %d, want the new %d", got, h2.pid)
	}
	if got := f.Restarts(); got != 1 {
		t.Fatalf("Restarts() = %d, want 1", got)
	}
	// While it lives the cached pid is returned, without a scan.
	scanned := f.lastScan
	*now = now.Add(time.Hour)
	if got := f.PID(); got != h2.pid || !f.lastScan.Equal(scanned) {
		t.Fatalf("PID() = %d, last scan %v (was %v): want %d without a scan", got, f.lastScan, scanned, h2.pid)
	}
}

// TestFinderConcurrent calls PID from several goroutines (run with -race).
func TestFinderConcurrent(t *testing.T) {
	name := lcName("kf-conc-")
	h := lcStartHelper(t, lcLink(t, name), name)
	f, err := NewFinder(FinderConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if got := f.PID(); got != h.pid {
					t.Errorf("PID() = %d, want %d", got, h.pid)
					return
				}
				_ = f.Restarts()
			}
		})
	}
	wg.Wait()
}

// lcFakeProc writes a process into a fake proc root.
func lcFakeProc(t *testing.T, root string, pid, ppid int, start uint64, state byte, comm string, argv ...string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) %c %d %d %d 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", pid, comm, state, ppid, pid, pid, start)
	cmdline := strings.Join(argv, "\x00")
	if cmdline != "" {
		cmdline += "\x00"
	}
	for file, content := range map[string]string{"stat": stat, "cmdline": cmdline, "comm": comm + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFinderChoice tests the choice among matches on a fake /proc, where
// start times can be anything.
func TestFinderChoice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs func(t *testing.T, root string)
		self  int
		want  int
	}{
		{"parent even if younger", func(t *testing.T, root string) {
			lcFakeProc(t, root, 10, 1, 500, 'S', "uwsgi", "uwsgi", "--ini", "k.ini")
			lcFakeProc(t, root, 11, 10, 100, 'S', "uwsgi", "uwsgi", "--ini", "k.ini")
		}, 0, 10},
		{"oldest of two roots", func(t *testing.T, root string) {
			lcFakeProc(t, root, 20, 1, 300, 'S', "uwsgi", "uwsgi")
			lcFakeProc(t, root, 30, 1, 200, 'S', "uwsgi", "uwsgi")
			lcFakeProc(t, root, 31, 30, 250, 'S', "uwsgi", "uwsgi")
		}, 0, 30},
		{"lowest pid on a tie", func(t *testing.T, root string) {
			lcFakeProc(t, root, 41, 1, 300, 'S', "uwsgi", "uwsgi")
			lcFakeProc(t, root, 40, 1, 300, 'S', "uwsgi", "uwsgi")
		}, 0, 40},
		{"not a zombie or dead", func(t *testing.T, root string) {
			lcFakeProc(t, root, 50, 1, 100, 'Z', "uwsgi")
			lcFakeProc(t, root, 51, 1, 110, 'X', "uwsgi")
			lcFakeProc(t, root, 52, 1, 120, 'S', "uwsgi", "uwsgi")
		}, 0, 52},
		{"not the agent", func(t *testing.T, root string) {
			lcFakeProc(t, root, 60, 1, 100, 'S', "uwsgi", "uwsgi")
			lcFakeProc(t, root, 61, 1, 120, 'S', "uwsgi", "uwsgi")
		}, 60, 61},
		{"odd entries", func(t *testing.T, root string) {
			lcFakeProc(t, root, 70, 1, 100, 'S', "uwsgi", "uwsgi")
			for name, stat := range map[string]string{"71": "garbage", "72": "", "self": "x", "-3": "x"} {
				if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, name, "stat"), []byte(stat), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, 0, 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.procs(t, root)
			f, _ := lcFinder(t, FinderConfig{Name: "uwsgi", ProcRoot: root})
			f.self = tc.self
			if got := f.PID(); got != tc.want {
				t.Fatalf("PID() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestNewFinderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  FinderConfig
		want string
	}{
		{"none", FinderConfig{}, "exactly one"},
		{"two", FinderConfig{Name: "keystone", PIDFile: "/run/k.pid"}, "exactly one"},
		{"bad regexp", FinderConfig{Cmdline: "("}, "cmdline"},
		{"path as name", FinderConfig{Name: "/usr/bin/keystone"}, `"/usr/bin/keystone"`},
		{"no proc", FinderConfig{Name: "keystone", ProcRoot: "/nonexistent"}, "/nonexistent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFinder(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
