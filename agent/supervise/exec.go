package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// cleanEnv checks every KEY=VALUE and keeps the last of duplicate keys, as
// os/exec does; os.StartProcess would pass duplicates on and leave the
// winner to the child's libc.
func cleanEnv(env []string) ([]string, error) {
	last := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("supervise: environment entry %d %q is not KEY=VALUE", i+1, kv)
		case k == "":
			return nil, fmt.Errorf("supervise: environment entry %d %q has an empty name", i+1, kv)
		case strings.IndexByte(kv, 0) >= 0:
			return nil, fmt.Errorf("supervise: environment entry %d (%s) contains a NUL byte", i+1, k)
		}
		last[k] = i
	}
	out := make([]string, 0, len(last)) // never nil: nil would mean the agent's environment
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if last[k] == i {
			out = append(out, kv)
		}
	}
	return out, nil
}

// LookPath finds name in the child's PATH. exec.LookPath cannot be used: it
// reads the agent's PATH, not the one the child is given.
func LookPath(name string, env []string) (string, error) {
	return findInPath(name, env, 0o111)
}

// SourcePath finds name in the child's PATH as bash's "." does: any regular
// file, executable or not (kolla installs kolla_extend_start 0644).
func SourcePath(name string, env []string) (string, error) {
	return findInPath(name, env, 0)
}

// findInPath returns the first regular file name in env's PATH whose mode
// has one of the bits of mode (0: any).
func findInPath(name string, env []string, mode os.FileMode) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // a relative PATH entry would depend on the working directory
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && (mode == 0 || fi.Mode()&mode != 0) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (the child's PATH is %q)", exec.ErrNotFound, path)
}

// start forks and execs the child in a new process group. Go's fork puts the
// child in its group (setpgid) before exec and returns after the exec, so the
// group is there before any signal is forwarded. On failure it returns the
// code a shell would: 127 not found, 126 not executable, 1 otherwise.
func (s *Supervisor) start() (pid, code int, err error) {
	path, err := LookPath(s.command[0], s.env)
	if err != nil {
		return 0, 127, fmt.Errorf("supervise: start %s: %w", s.command[0], err)
	}
	if s.dir != "" {
		// Checked apart: the fork reports a bad directory as if the program
		// were missing.
		if fi, err := os.Stat(s.dir); err != nil {
			return 0, 1, fmt.Errorf("supervise: working directory: %w", err)
		} else if !fi.IsDir() {
			return 0, 1, fmt.Errorf("supervise: working directory %s is not a directory", s.dir)
		}
	}
	files, closeChild, err := s.outputs()
	if err != nil {
		return 0, 1, fmt.Errorf("supervise: output pipes: %w", err)
	}
	p, err := os.StartProcess(path, s.command, &os.ProcAttr{
		Dir:   s.dir,
		Env:   s.env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: s.credential()},
	})
	closeChild() // the child has its copies; the copiers see EOF when it is done
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			code = 127
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC),
			errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ETXTBSY):
			code = 126
		default:
			code = 1
		}
		return 0, code, fmt.Errorf("supervise: start %s: %w", path, err)
	}
	pid = p.Pid
	// Release, not Wait: the status is collected by the reap loop.
	_ = p.Release()
	attrs := []any{"pid", pid, "command", s.command, "path", path}
	if s.quiet {
		attrs[3] = []string{s.command[0], fmt.Sprintf("(%d arguments not shown)", len(s.command)-1)}
	}
	if s.cred != nil {
		c := s.cred.Credential
		attrs = append(attrs, "user", s.cred.Name, "uid", c.Uid, "gid", c.Gid, "groups", c.Groups)
	}
	s.log.Info("service started", attrs...)
	return pid, 0, nil
}

// outputs returns the child's stdin, stdout and stderr: the agent's own, or
// the write ends of pipes whose read ends are copied to s.stdout/s.stderr.
// closeChild closes the parent's copies of the write ends after the fork.
func (s *Supervisor) outputs() (files []*os.File, closeChild func(), err error) {
	files = []*os.File{os.Stdin, os.Stdout, os.Stderr}
	var writeEnds []*os.File
	closeChild = func() {
		for _, w := range writeEnds {
			w.Close()
		}
	}
	for i, w := range []io.Writer{s.stdout, s.stderr} {
		if w == nil {
			continue
		}
		r, wr, err := os.Pipe()
		if err != nil {
			closeChild()
			return nil, func() {}, err
		}
		files[i+1] = wr
		writeEnds = append(writeEnds, wr)
		s.copying.Add(1)
		go func() {
			defer s.copying.Done()
			defer r.Close()
			io.Copy(w, r) // ends at EOF: every holder of the write end is gone
		}()
	}
	return files, closeChild, nil
}

// credential is what the fork applies: setgroups (even to no groups, which
// drops root's), then setgid, then setuid.
func (s *Supervisor) credential() *syscall.Credential {
	if s.cred == nil {
		return nil
	}
	c := s.cred.Credential
	return &c
}
