package probes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lcZombie starts a child of the test and kills it without reaping it:
// a real zombie until the test ends. Nothing else waits for it (os.Process
// waits only when asked), so it stays one.
func lcZombie(t *testing.T, path, argv0 string) int {
	t.Helper()
	// The helper environment: path may be the test binary, which must not
	// run the tests again.
	env := append(os.Environ(), testHelperEnv+"=hold")
	p, err := os.StartProcess(path, []string{argv0, "100"}, &os.ProcAttr{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Wait() })
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	lcWaitFor(t, fmt.Sprintf("pid %d to be a zombie", p.Pid), func() bool {
		st, err := readProcStat("/proc", p.Pid)
		return err == nil && st.state == 'Z'
	})
	return p.Pid
}

// lcWaitFor polls cond until it holds, failing the test after 10s.
func lcWaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lcSleepPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/bin/sleep", "/usr/bin/sleep"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no sleep binary in /bin or /usr/bin")
	return ""
}

func TestProcessCheck(t *testing.T) {
	self := os.Getpid()
	zombie := lcZombie(t, lcSleepPath(t), "sleep")
	gone := lcGoneProcess(t)
	for _, tc := range []struct {
		name    string
		pid     int
		wantErr string // "" for a pass
	}{
		{"running", self, ""},
		{"none", 0, "no service process"},
		{"zombie", zombie, fmt.Sprintf("pid %d is a zombie", zombie)},
		{"gone", gone, fmt.Sprintf("pid %d does not exist", gone)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			detail, err := lcCheck(t, NewProcess(lcPID(tc.pid)))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("got error %v, want a pass", err)
				}
				if want := fmt.Sprintf("pid %d (", tc.pid); !strings.HasPrefix(detail, want) {
					t.Fatalf("detail %q, want it to start with %q", detail, want)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("got (%q, %v), want error %q", detail, err, tc.wantErr)
			}
		})
	}
}

// TestProcessCheckProcContent runs the check on a fake proc root: odd
// content is an error naming the file, never a panic.
func TestProcessCheckProcContent(t *testing.T) {
	for _, tc := range []struct {
		name, stat, wantErr string
	}{
		{"dead", "7 (x) X 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0", "pid 7 is dead"},
		{"comm with parens", "7 (a) Z (b) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0", ""},
		{"empty", "", "unexpected format"},
		{"no fields", "7 (x)", "unexpected format"},
		{"ends at paren", "7 (x", "unexpected format"},
		{"reversed parens", "7 )x( S 1", "unexpected format"},
		{"bad ppid", "7 (x) S p 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0", "unexpected format"},
		{"long state", "7 (x) SS 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0", "unexpected format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "7", "stat"), []byte(tc.stat), 0o644); err != nil {
				t.Fatal(err)
			}
			c := NewProcess(lcPID(7))
			c.procRoot = root
			detail, err := lcCheck(t, c)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got error %v, want a pass", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got (%q, %v), want error with %q", detail, err, tc.wantErr)
			}
		})
	}
}

func TestParseProcStatFields(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, ok := parseProcStat(b)
	if !ok || st.ppid != os.Getppid() || st.startTime == 0 || !isLiveState(st.state) || st.comm == "" {
		t.Fatalf("parsed %+v, %v from %q (ppid %d)", st, ok, b, os.Getppid())
	}
	// The kernel's errors for a vanished process are "gone".
	if !isGone(syscall.ESRCH) || !isGone(&os.PathError{Err: os.ErrNotExist}) || isGone(syscall.EACCES) {
		t.Fatal("isGone")
	}
}
