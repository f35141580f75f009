package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExecCheck(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "myprobe")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"via env PATH, FOO=$FOO\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		argv    []string
		env     []string
		detail  string
		wantErr string
	}{
		{"output", []string{"sh", "-c", "echo hello"}, nil, "hello", ""},
		{"no output", []string{"true"}, nil, "exit 0", ""},
		{"stderr and exit code", []string{"sh", "-c", "echo out; echo oops >&2; exit 3"}, nil, "", "exit 3: out\noops"},
		{"exit code only", []string{"false"}, nil, "", "exit 1"},
		{"signal", []string{"sh", "-c", "kill -9 $$"}, nil, "", "killed by signal 9 (killed)"},
		{"stdin is /dev/null", []string{"sh", "-c", "cat; echo done"}, nil, "done", ""},
		{"env PATH", []string{"myprobe"}, []string{"PATH=" + dir, "FOO=bar"}, "via env PATH, FOO=bar", ""},
		{"not in env PATH", []string{"sh", "-c", "true"}, []string{"PATH=" + dir}, "", `exec sh: not found in PATH "` + dir + `"`},
		{"not found", []string{"no-such-probe-command"}, nil, "", "exec no-such-probe-command: not found in PATH"},
		{"not executable", []string{filepath.Join(dir, "missing")}, nil, "", "exec " + filepath.Join(dir, "missing") + ": stat"},
		{"empty", nil, nil, "", "exec check: no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			detail, err := lcExec(t, NewExec(tc.argv, nil, tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("got (%q, %v), want error %q", detail, err, tc.wantErr)
				}
				return
			}
			if err != nil || detail != tc.detail {
				t.Fatalf("got (%q, %v), want %q", detail, err, tc.detail)
			}
		})
	}
}

// lcExec runs one look and gives what it saw as "verdict: output": the
// output a pass has (or "exit 0"), or a failure's.
func lcExec(t *testing.T, c *ExecCheck) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return lcExecCtx(ctx, c)
}

func lcExecCtx(ctx context.Context, c *ExecCheck) (string, error) {
	verdict, out, err := c.look(ctx)
	switch {
	case err != nil:
		return "", err
	case verdict == "exit 0" && out != "":
		return out, nil
	case verdict == "exit 0":
		return verdict, nil
	case out != "":
		return "", errors.New(verdict + ": " + out)
	}
	return "", errors.New(verdict)
}

// TestExecCheckOutputNotInReason: the check's reason says how the command
// ended but not what it printed (a script may print a password); the
// output is on the error for the agent's log.
func TestExecCheckOutputNotInReason(t *testing.T) {
	c := NewExec([]string{"sh", "-c", "echo DB_PASSWORD=hunter2; exit 3"}, nil, nil)
	detail, err := lcCheck(t, c)
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Output != "DB_PASSWORD=hunter2" || ee.Verdict != "exit 3" {
		t.Fatalf("got (%q, %#v), want an ExecError with the output apart", detail, err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("reason %q shows the output", err)
	}
	c = NewExec([]string{"sh", "-c", "echo TOKEN=hunter2"}, nil, nil)
	if detail, err := lcCheck(t, c); err != nil || detail != "exit 0" {
		t.Errorf("pass: got (%q, %v), want exit 0 and no output", detail, err)
	}
}

// lcSpawner is the real OSSpawner, recording what it was asked to start.
type lcSpawner struct {
	argv []string
	attr *os.ProcAttr
}

func (s *lcSpawner) Start(argv []string, attr *os.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	s.argv, s.attr = argv, attr
	return OSSpawner{}.Start(argv, attr)
}

func TestExecCheckUsesSpawner(t *testing.T) {
	sp := &lcSpawner{}
	if _, err := lcCheck(t, NewExec([]string{"true", "x"}, sp, nil)); err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(sp.argv[0]) || sp.argv[1] != "x" {
		t.Errorf("argv %q: want argv[0] resolved", sp.argv)
	}
	if sys := sp.attr.Sys; sys == nil || !sys.Setpgid {
		t.Errorf("Sys %#v: want Setpgid", sp.attr.Sys)
	}
}

// lcAlive reports whether pid is a process still running (not gone, not a
// zombie waiting for a parent that does not reap).
func lcAlive(pid int) bool {
	st, err := readProcStat("/proc", pid)
	return err == nil && isLiveState(st.state)
}

// TestExecCheckTimeoutKillsGroup: at the deadline the command and what it
// started (a background grandchild) are killed, and the command is reaped.
func TestExecCheckTimeoutKillsGroup(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	script := fmt.Sprintf(`sleep 100 & echo $$ $! > %s.tmp; mv %s.tmp %s; echo started; sleep 100`, pids, pids, pids)
	// 5 s: time for a loaded machine to start the shell and say "started".
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	detail, err := lcExecCtx(ctx, NewExec([]string{"sh", "-c", script}, nil, nil))
	took := time.Since(start)
	if err == nil || !strings.HasPrefix(err.Error(), "context deadline exceeded, process group killed: started") {
		t.Fatalf("got (%q, %v), want a timeout with the output", detail, err)
	}
	if took > 5*time.Second+deadlineSlack {
		t.Fatalf("took %v: the look did not end at its 5s timeout", took)
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("pids file %q", b)
	}
	sh, _ := strconv.Atoi(f[0])
	grandchild, _ := strconv.Atoi(f[1])
	// sh was our child: reaped, so gone (not even a zombie). The grandchild
	// was reparented; whether its new parent reaps it is not ours to judge,
	// but it must not run.
	if _, err := readProcStat("/proc", sh); !isGone(err) {
		t.Errorf("sh (pid %d) still exists: %v", sh, err)
	}
	lcWaitFor(t, "the grandchild to die", func() bool { return !lcAlive(grandchild) })
}

// TestExecCheckLeftovers: a command that exits leaving a background process
// in its group passes, and the leftover is killed; one that escaped the group
// (setsid) and holds the output pipe cannot keep the look waiting.
func TestExecCheckLeftovers(t *testing.T) {
	dir := t.TempDir()
	t.Run("in the group", func(t *testing.T) {
		pidFile := filepath.Join(dir, "bg")
		script := fmt.Sprintf(`sleep 100 & echo $! > %s.tmp; mv %s.tmp %s; echo ok`, pidFile, pidFile, pidFile)
		detail, err := lcExec(t, NewExec([]string{"sh", "-c", script}, nil, nil))
		if err != nil || detail != "ok" {
			t.Fatalf("got (%q, %v), want a pass", detail, err)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		bg, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		lcWaitFor(t, "the leftover to die", func() bool { return !lcAlive(bg) })
	})
	t.Run("escaped", func(t *testing.T) {
		setsid, err := lookPathIn("setsid", os.Getenv("PATH"))
		if err != nil {
			t.Fatal("setsid not found (util-linux): needed to escape the process group")
		}
		pidFile := filepath.Join(dir, "escaped")
		// The command waits until the escape is done: it would otherwise
		// be killed with the group, before it could escape.
		script := fmt.Sprintf(`%s sh -c 'echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 100' &
			while [ ! -e %s ]; do sleep 0.01; done; echo ok`, setsid, pidFile, pidFile, pidFile, pidFile)
		start := time.Now()
		detail, err := lcExec(t, NewExec([]string{"sh", "-c", script}, nil, nil))
		took := time.Since(start)
		var escaped int
		lcWaitFor(t, "the escaped pid", func() bool {
			b, err := os.ReadFile(pidFile)
			escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		})
		t.Cleanup(func() { _ = syscall.Kill(escaped, syscall.SIGKILL) })
		if err != nil || detail != "ok" {
			t.Fatalf("got (%q, %v), want a pass", detail, err)
		}
		// The look ended while the escaped process still runs (a look
		// that waited for its output to end would end with it), and
		// within the output's drain grace, give or take a loaded machine.
		if !lcAlive(escaped) {
			t.Fatal("the escaped process is gone: the look waited for it")
		}
		if took > execDrainGrace+deadlineSlack {
			t.Fatalf("took %v: the escaped process held the look past the drain grace (%v)", took, execDrainGrace)
		}
	})
}

func TestExecCheckTruncation(t *testing.T) {
	script := `i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; exit 2`
	_, err := lcExec(t, NewExec([]string{"sh", "-c", script}, nil, nil))
	if err == nil {
		t.Fatal("passed")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "exit 2: [") || !strings.Contains(msg, "bytes cut] ...") || !strings.HasSuffix(msg, "line 99") {
		t.Fatalf("reason %q: want the exit code, a cut marker and the last line", msg)
	}
	if len(msg) > 512 {
		t.Fatalf("reason is %d bytes, more than a report shows", len(msg))
	}
}

func TestExecCheckCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewExec([]string{"true"}, nil, nil).Check(ctx); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("got %v, want not started", err)
	}
}

func TestExecTail(t *testing.T) {
	tail := &execTail{max: 8}
	for _, s := range []string{"abc", "defgh", "ij"} {
		_, _ = tail.Write([]byte(s))
	}
	if got := tail.String(); got != "[2 bytes cut] ...cdefghij" {
		t.Fatalf("got %q", got)
	}
	tail = &execTail{max: 8}
	_, _ = tail.Write([]byte("0123456789abcdef"))
	if got := tail.String(); got != "[8 bytes cut] ...89abcdef" {
		t.Fatalf("got %q", got)
	}
	// A cut inside a multi-byte character does not leave half of it.
	tail = &execTail{max: 4}
	_, _ = tail.Write([]byte("é€ok"))
	if got := tail.String(); got != "[5 bytes cut] ...ok" {
		t.Fatalf("got %q", got)
	}
	tail = &execTail{max: 8}
	_, _ = tail.Write([]byte("  short\n"))
	if got := tail.String(); got != "short" {
		t.Fatalf("got %q", got)
	}
}
