package probes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// execOutputMax bounds the output kept from an exec check. The LAST bytes
// are kept: a failing script's verdict (a traceback's exception, the last
// "ERROR" line) comes at its end. With "exit N: " and the cut marker the
// reason stays within the 512 bytes a report shows of it.
const execOutputMax = 448

// execDrainGrace is how long, after the command has ended and its process
// group has been killed, reading its output may still wait for end-of-file:
// only a process that left the group (setsid) can still hold the pipe then,
// and it must not keep the look waiting.
const execDrainGrace = 100 * time.Millisecond

// ExecCheck runs a command; exit status 0 passes. Unlike the kubelet, which
// leaves a timed-out exec probe running, it kills the command's whole process
// group when the look's context ends, and after the command has exited it
// kills whatever the command left running in its group.
type ExecCheck struct {
	argv []string
	sp   Spawner
	env  []string // nil: the agent's environment
}

// NewExec returns a check that runs argv through sp (OSSpawner if nil) with
// environment env (the agent's if nil). argv[0] is looked up in env's PATH,
// or the agent's when env has none.
func NewExec(argv []string, sp Spawner, env []string) *ExecCheck {
	if sp == nil {
		sp = OSSpawner{}
	}
	return &ExecCheck{argv: append([]string(nil), argv...), sp: sp, env: env}
}

// Check implements Checker. A failure is an *ExecError; a pass's output
// is dropped (see ExecError).
func (c *ExecCheck) Check(ctx context.Context) (string, error) {
	verdict, out, err := c.look(ctx)
	switch {
	case err != nil:
		return "", err
	case verdict == "exit 0":
		return verdict, nil
	}
	return "", &ExecError{Verdict: verdict, Output: out}
}

// look runs the command once: its verdict ("exit 0" passes) and output, or
// an error when it could not be started.
func (c *ExecCheck) look(ctx context.Context) (verdict, out string, err error) {
	if len(c.argv) == 0 || c.argv[0] == "" {
		return "", "", errors.New("exec check: no command")
	}
	if err := ctx.Err(); err != nil {
		return "", "", fmt.Errorf("exec %s: not started: %w", c.argv[0], err)
	}
	path, err := lookPathIn(c.argv[0], c.searchPath())
	if err != nil {
		return "", "", fmt.Errorf("exec %s: %w", c.argv[0], err)
	}
	ws, out, ctxErr, err := c.run(ctx, append([]string{path}, c.argv[1:]...))
	if err != nil {
		return "", "", fmt.Errorf("exec %s: %w", c.argv[0], err)
	}
	switch {
	case ctxErr != nil:
		verdict = fmt.Sprintf("%v, process group killed", ctxErr)
	case ws.Exited():
		verdict = fmt.Sprintf("exit %d", ws.ExitStatus())
	case ws.Signaled():
		verdict = fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	default:
		verdict = fmt.Sprintf("wait status %#x", uint32(ws))
	}
	return verdict, out, nil
}

// ExecError is a failed exec check. Its output is kept apart from its
// message: a script's output may print what it read (DB_PASSWORD=...), and
// the message becomes the check's reason, which probe answers and metrics
// show. The output goes to the agent's log only.
type ExecError struct {
	Verdict string // "exit 1", "killed by signal 9 (killed)"
	Output  string // its last execOutputMax bytes, trimmed
}

func (e *ExecError) Error() string {
	if e.Output != "" {
		return e.Verdict + " (its output is in the agent's log)"
	}
	return e.Verdict
}

// run starts argv in a process group of its own, with stdin /dev/null and
// stdout and stderr into one pipe, and returns its status and output. ctxErr
// is set when ctx ended first and the group was killed.
func (c *ExecCheck) run(ctx context.Context, argv []string) (ws syscall.WaitStatus, out string, ctxErr, err error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, "", nil, err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, "", nil, err
	}
	defer r.Close()
	pid, done, err := c.sp.Start(argv, &os.ProcAttr{
		Env:   c.env,
		Files: []*os.File{devnull, w, w},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	w.Close() // ours: otherwise the read below never sees end-of-file
	if err != nil {
		return 0, "", nil, err
	}

	buf := &execTail{max: execOutputMax}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(buf, r) // ends at EOF, or with ErrClosed when r is closed below
	}()

	select {
	case ws = <-done:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		// SIGKILL cannot be ignored: the status comes as soon as the kernel
		// has torn the process down. Waiting for it means the spawner (the
		// reaper) has collected it, so no zombie and no running command
		// outlive the look.
		ws = <-done
	}
	// The group outlives its leader while any member lives (a background
	// "sleep &"); its id cannot be reused until the group is empty, so this
	// reaches only what the command left behind. ESRCH (nothing left) is fine.
	_ = syscall.Kill(-pid, syscall.SIGKILL)

	t := time.NewTimer(execDrainGrace)
	defer t.Stop()
	select {
	case <-readDone:
	case <-t.C:
		r.Close() // a process that left the group holds the write end
		<-readDone
	}
	return ws, buf.String(), ctxErr, nil
}

// searchPath is the PATH argv[0] is looked up in: env's last PATH (the one a
// process would see), else the agent's own.
func (c *ExecCheck) searchPath() string {
	for i := len(c.env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(c.env[i], "PATH="); ok {
			return v
		}
	}
	return os.Getenv("PATH")
}

// lookPathIn is exec.LookPath with an explicit PATH: the command's
// environment, not the agent's, decides where it is found.
func lookPathIn(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, isExecutable(file)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "." // POSIX: an empty PATH element is the current directory
		}
		p := filepath.Join(dir, file)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in PATH %q", path)
}

func isExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return &fs.PathError{Op: "exec", Path: path, Err: fs.ErrPermission}
	}
	return nil
}

// execTail is an io.Writer that keeps the last max bytes written to it.
type execTail struct {
	max   int
	buf   []byte
	total int
}

func (t *execTail) Write(p []byte) (int, error) {
	n := len(p)
	t.total += n
	if len(p) > t.max {
		p = p[len(p)-t.max:]
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept output, trimmed, valid UTF-8, and marked when
// something was cut off its front.
func (t *execTail) String() string {
	b := t.buf
	if cut := t.total - len(b); cut > 0 {
		// Do not start inside a multi-byte character.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
		s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
		return fmt.Sprintf("[%d bytes cut] ...%s", t.total-len(b), s)
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
}
