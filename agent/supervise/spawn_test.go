package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func helperAttr() *os.ProcAttr {
	return &os.ProcAttr{Env: []string{testPath}, Sys: &syscall.SysProcAttr{Setpgid: true}}
}

// Helpers started while the service runs get their own exit status, even
// though the reap loop owns every wait4(-1); and 200 quick ones in a row
// lose none (the registration race).
func TestStartHelperStatusHandedOver(t *testing.T) {
	s, _, res := run(t, context.Background(), Config{Command: sh("sleep 30"), Env: []string{testPath}})
	poll(t, 5*time.Second, "service pid", func() (bool, string) { return s.PID() != 0, "no pid" })
	for i := range 200 {
		code := i % 7
		_, done, err := s.Start([]string{"/bin/sh", "-c", "exit " + string(rune('0'+code))}, helperAttr())
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		select {
		case ws := <-done:
			if ws.ExitStatus() != code {
				t.Fatalf("helper %d: exit %d, want %d", i, ws.ExitStatus(), code)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("helper %d: no status handed over", i)
		}
	}
	s.Stop()
	r := wait(t, res, 10*time.Second)
	if r.err != nil {
		t.Fatalf("Run: %v (a helper's status must not confuse the loop)", r.err)
	}
	if s.PID() != 0 {
		t.Errorf("PID() = %d after the service ended", s.PID())
	}
}

// Start refuses when nothing reaps; a helper still running when the service
// ends is killed and its status still handed over.
func TestStartOutsideRun(t *testing.T) {
	s, err := New(Config{Command: sh("exit 0"), Env: []string{testPath}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Start([]string{"/bin/true"}, helperAttr()); !errors.Is(err, errNotRunning) {
		t.Fatalf("Start before Run: %v, want errNotRunning", err)
	}

	s2, _, res := run(t, context.Background(), Config{Command: sh("sleep 30"), Env: []string{testPath}})
	poll(t, 5*time.Second, "service pid", func() (bool, string) { return s2.PID() != 0, "no pid" })
	_, done, err := s2.Start([]string{"/bin/sh", "-c", "sleep 100"}, helperAttr())
	if err != nil {
		t.Fatal(err)
	}
	s2.Stop()
	wait(t, res, 10*time.Second)
	select {
	case ws := <-done:
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("helper status %v, want killed by SIGKILL", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a helper outliving the service got no status")
	}
	if _, _, err := s2.Start([]string{"/bin/true"}, helperAttr()); err == nil {
		t.Error("Start after Run returned no error")
	}
}

// A helper (an exec check, a reload validator) runs as the service's user,
// not as the agent: it is the service's code. A credential the caller sets
// itself is kept.
func TestStartHelperAsServiceUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change uid (CI runs as root)")
	}
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	writeFile(t, filepath.Join(root, "etc/group"), "root:x:0:\nnogroup:x:65534:\n")
	cred, err := LookupCredential(root, "nobody", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := worldWritable(t)
	s, _, res := run(t, context.Background(), Config{Command: sh("sleep 30"), Env: []string{testPath}, Credential: cred})
	poll(t, 5*time.Second, "service pid", func() (bool, string) { return s.PID() != 0, "no pid" })
	ids := func(name string, attr *os.ProcAttr) string {
		out := filepath.Join(dir, name)
		_, done, err := s.Start([]string{"/bin/sh", "-c", "id -u > " + out}, attr)
		if err != nil {
			t.Fatal(err)
		}
		<-done
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	mine := helperAttr()
	if got := ids("helper", mine); got != "65534" {
		t.Errorf("helper ran as uid %s, want the service's 65534", got)
	}
	own := helperAttr()
	own.Sys.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	if got := ids("own", own); got != "0" {
		t.Errorf("helper with its own credential ran as uid %s, want 0", got)
	}
	if mine.Sys.Credential != nil {
		t.Error("Start changed the caller's attr")
	}
	s.Stop()
	wait(t, res, 10*time.Second)
}
