package supervise

import (
	"context"
	"errors"
	"os"
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
