package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests run one Supervisor at a time and never t.Parallel: a Supervisor
// reaps every child of the process, so two would steal each other's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testPath = "PATH=/usr/bin:/bin"

// recorder keeps the supervisor's log records, to assert on and to show when
// a test fails.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

func (r *recorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Message == msg {
			n++
		}
	}
	return n
}

func (r *recorder) dump(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		var b strings.Builder
		rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		t.Logf("%s %s%s", rec.Level, rec.Message, b.String())
	}
}

type result struct {
	code int
	err  error
}

// run starts s.Run in a goroutine, and makes sure the child is gone when the
// test ends, whatever happened.
func run(t *testing.T, ctx context.Context, cfg Config) (*Supervisor, *recorder, <-chan result) {
	t.Helper()
	rec := &recorder{}
	cfg.Logger = slog.New(rec)
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	res := make(chan result, 1)
	go func() {
		code, err := s.Run(ctx)
		res <- result{code, err}
	}()
	t.Cleanup(func() {
		s.Stop()
		<-s.Done()
		if t.Failed() {
			rec.dump(t)
		}
	})
	return s, rec, res
}

func wait(t *testing.T, res <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(within):
		t.Fatalf("Run did not return within %v", within)
		return result{}
	}
}

// poll checks cond until it holds or the deadline passes.
func poll(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so within %v: %s", what, within, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitForLine(t *testing.T, path, line string) {
	t.Helper()
	poll(t, 10*time.Second, fmt.Sprintf("%s has line %q", filepath.Base(path), line), func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l == line {
				return true, ""
			}
		}
		return false, fmt.Sprintf("content %q", b)
	})
}

// children lists this process's children from /proc, by state ("Z" for a
// zombie).
func children(t *testing.T) map[int]string {
	t.Helper()
	me := os.Getpid()
	out := map[int]string{}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == me {
			out[pid] = f[0]
		}
	}
	return out
}

func countState(m map[int]string, state string) int {
	n := 0
	for _, s := range m {
		if s == state {
			n++
		}
	}
	return n
}

func noChildrenLeft(t *testing.T) {
	t.Helper()
	poll(t, 10*time.Second, "no children left", func() (bool, string) {
		c := children(t)
		return len(c) == 0, fmt.Sprintf("children %v", c)
	})
}

func sh(script string) []string { return []string{"sh", "-c", script} }

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no command", Config{}, "no command"},
		{"empty command", Config{Command: []string{""}}, "no command"},
		{"NUL in argument", Config{Command: []string{"echo", "a\x00b"}}, "NUL"},
		{"negative grace", Config{Command: []string{"true"}, Grace: -time.Second}, "negative grace"},
		{"env without =", Config{Command: []string{"true"}, Env: []string{"A=1", "B"}}, `entry 2 "B" is not KEY=VALUE`},
		{"env empty name", Config{Command: []string{"true"}, Env: []string{"=1"}}, "empty name"},
		{"forward SIGKILL", Config{Command: []string{"true"}, Signals: []os.Signal{syscall.SIGKILL}}, "cannot be caught"},
		{"forward SIGCHLD", Config{Command: []string{"true"}, Signals: []os.Signal{syscall.SIGCHLD}}, "SIGCHLD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
		{"kill -USR1 $$", 128 + 10},
	} {
		t.Run(tc.script, func(t *testing.T) {
			_, _, res := run(t, context.Background(), Config{Command: sh(tc.script), Env: []string{testPath}})
			r := wait(t, res, 10*time.Second)
			if r.err != nil || r.code != tc.want {
				t.Fatalf("Run = %d, %v; want %d, nil", r.code, r.err, tc.want)
			}
		})
	}
}

func TestStartFailure(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantCode int
		wantErr  string
		wantIs   error
	}{
		{"not in PATH", Config{Command: []string{"no-such-command-kolla"}, Env: []string{testPath}},
			127, `supervise: start no-such-command-kolla: executable file not found in $PATH (the child's PATH is "/usr/bin:/bin")`, exec.ErrNotFound},
		{"missing path", Config{Command: []string{filepath.Join(dir, "missing")}},
			127, "no such file or directory", syscall.ENOENT},
		{"not executable", Config{Command: []string{notExec}},
			126, "permission denied", syscall.EACCES},
		{"missing working directory", Config{Command: []string{"true"}, Dir: filepath.Join(dir, "nodir")},
			1, "supervise: working directory", os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, res := run(t, context.Background(), tc.cfg)
			r := wait(t, res, 10*time.Second)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) || !errors.Is(r.err, tc.wantIs) {
				t.Fatalf("Run error %v; want one containing %q and matching %v", r.err, tc.wantErr, tc.wantIs)
			}
			if r.code != tc.wantCode {
				t.Fatalf("Run code %d, want %d", r.code, tc.wantCode)
			}
		})
	}
}

// Each forwarded signal reaches the child and the rest of its process group.
func TestSignalsForwarded(t *testing.T) {
	dir := t.TempDir()
	out, ready := filepath.Join(dir, "out"), filepath.Join(dir, "ready")
	// The grandchild is a background job: sh starts those with SIGINT and
	// SIGQUIT ignored, and a non-interactive sh cannot trap an ignored signal.
	grandchild := `for s in HUP USR1 USR2 WINCH; do trap "echo grandchild $s >> $OUT" $s; done
		trap "echo grandchild TERM >> $OUT; exit 0" TERM
		echo ready >> $READY; while :; do sleep 0.05; done`
	script := `ulimit -c 0
		for s in HUP INT QUIT USR1 USR2 WINCH; do trap "echo child $s >> $OUT" $s; done
		trap 'echo child TERM >> $OUT; wait; exit 0' TERM
		sh -c '` + grandchild + `' &
		echo ready >> $READY; while :; do sleep 0.05; done`
	_, _, res := run(t, context.Background(), Config{
		Command: sh(script), Dir: dir, Env: []string{testPath, "OUT=" + out, "READY=" + ready},
	})
	poll(t, 10*time.Second, "child and grandchild ready", func() (bool, string) {
		b, _ := os.ReadFile(ready)
		return string(b) == "ready\nready\n", fmt.Sprintf("%q", b)
	})
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH} {
		name := strings.TrimPrefix(sigName(sig), "SIG")
		t.Run(name, func(t *testing.T) {
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			waitForLine(t, out, "child "+name)
			if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
				waitForLine(t, out, "grandchild "+name)
			}
		})
	}
	t.Run("TERM", func(t *testing.T) {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := wait(t, res, 10*time.Second)
		if r.err != nil || r.code != 0 {
			t.Fatalf("Run = %d, %v; want 0, nil", r.code, r.err)
		}
		waitForLine(t, out, "child TERM")
		waitForLine(t, out, "grandchild TERM")
	})
	noChildrenLeft(t)
}

func sigName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGWINCH: "SIGWINCH"}[s]
}

// A child that ignores SIGTERM is killed after the grace period, and so is
// the rest of its group.
func TestGraceThenKill(t *testing.T) {
	dir := t.TempDir()
	out, ready := filepath.Join(dir, "out"), filepath.Join(dir, "ready")
	const grace = 300 * time.Millisecond
	s, rec, res := run(t, context.Background(), Config{
		Command: sh(`trap 'echo TERM >> $OUT' TERM
			sh -c 'trap "" TERM; while :; do sleep 0.05; done' &
			echo ready > $READY; while :; do sleep 0.05; done`),
		Env:   []string{testPath, "OUT=" + out, "READY=" + ready},
		Grace: grace,
	})
	waitForLine(t, ready, "ready")
	start := time.Now()
	s.Stop()
	r := wait(t, res, 10*time.Second)
	elapsed := time.Since(start)
	if r.err != nil || r.code != 128+9 {
		t.Fatalf("Run = %d, %v; want 137, nil", r.code, r.err)
	}
	if elapsed < grace {
		t.Errorf("SIGKILL after %v, before the grace period %v", elapsed, grace)
	}
	waitForLine(t, out, "TERM")
	if n := rec.count("grace period over; sending SIGKILL to the process group"); n != 1 {
		t.Errorf("%d SIGKILL records, want 1", n)
	}
	noChildrenLeft(t)
}

// However the stop is asked for, and however often, the child gets exactly
// one SIGTERM; cancelling the context returns the child's own code.
func TestStopSendsOneSIGTERM(t *testing.T) {
	dir := t.TempDir()
	out, ready := filepath.Join(dir, "out"), filepath.Join(dir, "ready")
	release := filepath.Join(dir, "release")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, rec, res := run(t, ctx, Config{
		// The child waits for the test's word before exiting, so that every
		// way of stopping reaches the supervisor while the child lives.
		Command: sh(`trap 'echo TERM >> $OUT' TERM; echo ready > $READY
			while [ ! -e $RELEASE ]; do sleep 0.02; done; exit 7`),
		Env:   []string{testPath, "OUT=" + out, "READY=" + ready, "RELEASE=" + release},
		Grace: time.Minute,
	})
	waitForLine(t, ready, "ready")
	start := time.Now()
	cancel()
	s.Stop()
	s.Stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitForLine(t, out, "TERM")
	// The SIGTERM sent to the test process above must have been handled
	// before the child goes, or the check below could pass too early.
	poll(t, 10*time.Second, "SIGTERM handled", func() (bool, string) {
		return rec.count("signal received") == 1, fmt.Sprintf("%d signals received", rec.count("signal received"))
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := wait(t, res, 10*time.Second)
	if r.err != nil || r.code != 7 {
		t.Fatalf("Run = %d, %v; want 7, nil", r.code, r.err)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("took %v: SIGKILL was not needed", time.Since(start))
	}
	b, _ := os.ReadFile(out)
	if string(b) != "TERM\n" {
		t.Errorf("child saw %q, want exactly one TERM", b)
	}
	s.Stop() // after Run: nothing to do
}

func TestContextCancel(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, res := run(t, ctx, Config{
		Command: sh(`trap 'exit 7' TERM; echo ready > $READY; while :; do sleep 0.02; done`),
		Env:     []string{testPath, "READY=" + ready},
		Grace:   time.Minute,
	})
	waitForLine(t, ready, "ready")
	cancel()
	r := wait(t, res, 30*time.Second) // well under the grace period: no SIGKILL
	if r.err != nil || r.code != 7 {
		t.Fatalf("Run = %d, %v; want 7, nil", r.code, r.err)
	}
}

func TestStopBeforeRun(t *testing.T) {
	s, err := New(Config{Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	code, err := s.Run(context.Background())
	if err == nil || code != 1 {
		t.Fatalf("Run = %d, %v; want 1 and an error", code, err)
	}
	if _, err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second Run: %v", err)
	}
	<-s.Done()
}

// When the main process ends on its own, what is left of its group is
// stopped and reaped before Run returns.
func TestLeftoversStopped(t *testing.T) {
	_, _, res := run(t, context.Background(), Config{
		Command: sh(`sleep 1000 & sleep 1000 & exit 5`),
		Env:     []string{testPath},
		Grace:   time.Minute,
	})
	r := wait(t, res, 30*time.Second) // the sleeps die of SIGTERM, long before SIGKILL
	if r.err != nil || r.code != 5 {
		t.Fatalf("Run = %d, %v; want 5, nil", r.code, r.err)
	}
	if c := children(t); len(c) != 0 {
		t.Fatalf("children left after Run: %v", c)
	}
}

// 1000 orphans are re-parented to the agent and reaped, while the service
// runs and when it exits with orphans still running.
func TestReapsOrphans(t *testing.T) {
	const orphans = 1000
	// ( cmd & ) forks a subshell that starts cmd and exits at once: cmd is
	// orphaned and the kernel hands it to the agent.
	spawn := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do ( %%s & ); i=$((i+1)); done`, orphans)

	t.Run("service keeps running", func(t *testing.T) {
		dir := t.TempDir()
		spawned := filepath.Join(dir, "spawned")
		s, rec, res := run(t, context.Background(), Config{
			Command: sh(fmt.Sprintf(spawn, "true") + `; echo > $SPAWNED; exec sleep 1000`),
			Env:     []string{testPath, "SPAWNED=" + spawned},
		})
		waitForLine(t, spawned, "")
		poll(t, 30*time.Second, "every orphan reaped", func() (bool, string) {
			c := children(t)
			return len(c) == 1 && rec.count("reaped") >= orphans,
				fmt.Sprintf("%d children (%d zombies), %d reaped", len(c), countState(c, "Z"), rec.count("reaped"))
		})
		s.Stop()
		r := wait(t, res, 10*time.Second)
		if r.err != nil || r.code != 128+15 {
			t.Fatalf("Run = %d, %v; want 143, nil", r.code, r.err)
		}
		if c := children(t); len(c) != 0 {
			t.Fatalf("children left after Run: %v", c)
		}
	})

	t.Run("service exits", func(t *testing.T) {
		_, rec, res := run(t, context.Background(), Config{
			Command: sh(fmt.Sprintf(spawn, "sleep 0.2") + `; exit 0`),
			Env:     []string{testPath},
			Grace:   time.Minute,
		})
		r := wait(t, res, 60*time.Second)
		if r.err != nil || r.code != 0 {
			t.Fatalf("Run = %d, %v; want 0, nil", r.code, r.err)
		}
		if c := children(t); len(c) != 0 {
			t.Fatalf("children left after Run (%d zombies): %v", countState(c, "Z"), c)
		}
		if n := rec.count("reaped"); n < orphans {
			t.Fatalf("%d orphans reaped, want %d", n, orphans)
		}
	})
}

// The child runs with the uid, gid and supplementary groups LookupCredential
// resolved from the image's files.
func TestCredential(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change uid")
	}
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	writeFile(t, filepath.Join(root, "etc/group"), "root:x:0:\nusers:x:100:nobody\nnogroup:x:65534:\nkolla:x:42400:nova,nobody\n")
	cred, err := LookupCredential(root, "nobody", "")
	if err != nil {
		t.Fatal(err)
	}

	dir := worldWritable(t)
	out := filepath.Join(dir, "id")
	_, _, res := run(t, context.Background(), Config{
		Command:    sh(`{ id -u; id -g; id -G; } > $OUT`),
		Env:        []string{testPath, "OUT=" + out},
		Dir:        dir,
		Credential: cred,
	})
	if r := wait(t, res, 10*time.Second); r.err != nil || r.code != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", r.code, r.err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "65534\n65534\n65534 100 42400\n"; string(b) != want {
		t.Fatalf("id printed %q, want %q", b, want)
	}
}

// worldWritable is a temporary directory that uid 65534 can write in.
func worldWritable(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's own parent is private to root; open it for traversal.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(filepath.Dir(dir)); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not searchable by other users; set TMPDIR elsewhere", d)
		}
		if d == filepath.Dir(d) {
			return dir
		}
	}
}

// The child's environment is exactly Config.Env.
func TestEnvironmentIsExplicit(t *testing.T) {
	t.Setenv("KOLLA_AGENT_TEST_LEAK", "agent's own")
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	_, _, res := run(t, context.Background(), Config{
		// No PATH in Env: sh is found in DefaultPath, and env by its path.
		Command: []string{"sh", "-c", `/usr/bin/env > "$OUT"`},
		Env:     []string{"OUT=" + out, "A=1", "B=x y", "A=2"},
	})
	if r := wait(t, res, 10*time.Second); r.err != nil || r.code != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", r.code, r.err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "PWD=") { // sh exports its own PWD
			got[l] = true
		}
	}
	want := map[string]bool{"OUT=" + out: true, "A=2": true, "B=x y": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("child environment %v, want %v", got, want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
