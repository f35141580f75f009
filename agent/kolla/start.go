package kolla

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/agent/supervise"
)

// What kolla's start.sh does between kolla_set_configs and the exec of the
// service, which images rely on: /run_command, the custom CA certificates,
// and the image's kolla_extend_start hook.
const (
	kollaRunCommand = "/run_command"
	kollaCACertDir  = "/var/lib/kolla/share/ca-certificates"
	// kollaCACertFallback is where kolla_copy_cacerts looks when the image
	// does not copy the share directory (kolla-ansible's config_files).
	kollaCACertFallback = "/var/lib/kolla/config_files/ca-certificates"
	kollaExtendStart    = "kolla_extend_start"
	kollaCopyCACerts    = "kolla_copy_cacerts"
	// hookDone starts what the wrapper writes once the hook has returned;
	// without it, the hook exited.
	hookDone = "kolla-agent-hook-returned"
)

// Hook is what the image's hook left for the service.
type Hook struct {
	Ran    bool
	Args   []string // ARGS, split on blanks as start.sh's ${ARGS} is
	Env    []string // the environment the hook exported
	Exited bool     // the hook called exit: the container ends with Code
	Code   int
}

// StartConfig is what Start needs.
type StartConfig struct {
	Root    string // prefixes every absolute path of the pod's filesystem
	Command string // config.json's command: /run_command and the hook's CMD
	// Env is the service's environment, which the hook runs in.
	Env []string
	// Credential is the service's user (nil: the agent's, the container's).
	Credential *supervise.Identity
	// SkipExtendStart: KOLLA_SKIP_EXTEND_START is set.
	SkipExtendStart bool
	Logger          *slog.Logger
}

// ImageError is what the image lacks for kolla's start (bad input: the
// image or its mounts, not a transient failure).
type ImageError struct{ msg string }

func (e *ImageError) Error() string { return e.msg }

func imageErr(format string, args ...any) error {
	return &ImageError{msg: fmt.Sprintf(format, args...)}
}

// Start does, once config.json is applied, what kolla's start.sh does
// before it execs the service: write /run_command, install the custom CA
// certificates, and source the image's kolla_extend_start (unless
// KOLLA_SKIP_EXTEND_START is set) in bash with start.sh's options, CMD
// and ARGS set, in the service's environment env. The hook runs as the
// service's user (c.Credential), as kolla's start.sh runs it as the
// image's user.
func Start(ctx context.Context, c StartConfig) (Hook, error) {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	env := c.Env
	if err := os.WriteFile(render.UnderRoot(c.Root, kollaRunCommand), []byte(c.Command), 0o644); err != nil {
		// kolla writes it as root through sudo; a non-root agent cannot,
		// and the agent itself never reads it.
		c.Logger.Info("kolla: "+kollaRunCommand+" not written", "reason", err.Error())
	} else if err := os.Chmod(render.UnderRoot(c.Root, kollaRunCommand), 0o644); err != nil {
		return Hook{}, err
	}
	if err := c.copyCACerts(ctx); err != nil {
		return Hook{}, err
	}
	if c.SkipExtendStart {
		return Hook{}, nil
	}
	hook, err := supervise.SourcePath(kollaExtendStart, env)
	if err != nil {
		return Hook{}, nil // an image without a hook
	}
	bash, err := supervise.LookPath("bash", env)
	if err != nil {
		return Hook{}, fmt.Errorf("kolla: %s needs bash, which the image does not have: %w", hook, err)
	}
	c.Logger.Info("kolla: running the image's start hook", "hook", hook)
	return c.runHook(ctx, bash, hook)
}

// runHook sources hook as start.sh does and reads back, on file
// descriptor 3, ARGS and the exported environment once it returns. The
// hook has a process group of its own: a stop signals all of it, and what
// it left running in the background is not waited for.
func (c StartConfig) runHook(ctx context.Context, bash, hook string) (Hook, error) {
	env, cred := c.Env, c.Credential
	// start.sh's options: errexit, pipefail, nounset, xtrace (the trace
	// goes to the container's log as under kolla).
	const script = `set -o errexit
set -o pipefail
set -o nounset
CMD=$1
ARGS=""
shift
set -o xtrace
. "$0"
{ set +o xtrace; } 2>/dev/null
{ printf '%s\0%s\0' ` + hookDone + ` "$ARGS"; env -0; } >&3
`
	r, w, err := os.Pipe()
	if err != nil {
		return Hook{}, err
	}
	defer r.Close()
	cmd := exec.CommandContext(ctx, bash, "-c", script, hook, c.Command)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cred != nil {
		cmd.SysProcAttr.Credential = &cred.Credential
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		w.Close()
		return Hook{}, fmt.Errorf("kolla: %s: %w", hook, err)
	}
	w.Close()
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	werr := cmd.Wait()
	// bash has written all it will; a process the hook left in the
	// background holds the pipe open, so stop reading soon after.
	var out []byte
	select {
	case out = <-read:
	case <-time.After(time.Second):
		r.Close()
		out = <-read
	}
	h := Hook{Ran: true}
	fields := bytes.Split(out, []byte{0})
	if len(fields) < 2 || string(fields[0]) != hookDone {
		h.Exited = true
		var ee *exec.ExitError
		switch {
		case werr == nil:
		case errors.As(werr, &ee):
			h.Code = ee.ExitCode()
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				h.Code = 128 + int(st.Signal())
			}
		default:
			return Hook{}, fmt.Errorf("kolla: %s: %w", hook, werr)
		}
		return h, nil
	}
	h.Args = strings.Fields(string(fields[1]))
	before := map[string]bool{}
	for _, kv := range env {
		before[kv] = true
	}
	for _, kv := range fields[2:] {
		s := string(kv)
		name, _, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			continue
		}
		// bash's own bookkeeping, unless the container had it.
		if (name == "_" || name == "SHLVL" || name == "OLDPWD" || name == "PWD") && !before[s] {
			continue
		}
		h.Env = append(h.Env, s)
	}
	return h, nil
}

// copyCACerts installs the certificates kolla mounts at
// /var/lib/kolla/share/ca-certificates (else, as kolla_copy_cacerts, those
// of /var/lib/kolla/config_files/ca-certificates) into the trust store: with
// the image's kolla_copy_cacerts when it has one (through sudo when the
// agent is not root, as start.sh), else as that does on Debian and Ubuntu
// (update-ca-certificates) and RHEL (update-ca-trust).
func (c StartConfig) copyCACerts(ctx context.Context) error {
	env := c.Env
	srcDir := kollaCACertDir
	ents, err := os.ReadDir(render.UnderRoot(c.Root, srcDir))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(ents) == 0) {
		srcDir = kollaCACertFallback
		ents, err = os.ReadDir(render.UnderRoot(c.Root, srcDir))
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // no custom CA: nothing to do
	case err != nil:
		return fmt.Errorf("kolla: the CA certificates: %w", err)
	case !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return !e.IsDir() }):
		return nil
	}
	run := func(argv ...string) error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("kolla: installing the CA certificates of %s: %s: %v: %s", srcDir, strings.Join(argv, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	if tool, err := supervise.LookPath(kollaCopyCACerts, env); err == nil {
		if os.Geteuid() == 0 {
			return run(tool)
		}
		return run("sudo", "-n", "-E", tool)
	}
	if os.Geteuid() != 0 {
		return imageErr("kolla: %s holds CA certificates, but the agent is not root and the image has no %s to install them with (run the agent as root with run.user, or give the image kolla's sudoers and %s)", srcDir, kollaCopyCACerts, kollaCopyCACerts)
	}
	var dest, update string
	switch {
	case isDir(render.UnderRoot(c.Root, "/usr/local/share/ca-certificates")):
		dest, update = "/usr/local/share/ca-certificates", "update-ca-certificates"
	case isDir(render.UnderRoot(c.Root, "/etc/pki/ca-trust/source/anchors")):
		dest, update = "/etc/pki/ca-trust/source/anchors", "update-ca-trust"
	default:
		return imageErr("kolla: %s holds CA certificates, but the image has no trust store the agent knows (/usr/local/share/ca-certificates, /etc/pki/ca-trust/source/anchors)", srcDir)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(render.UnderRoot(c.Root, srcDir), e.Name()))
		if err != nil {
			return fmt.Errorf("kolla: %w", err)
		}
		name := strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())) + ".crt" // update-ca-certificates reads *.crt only
		if err := os.WriteFile(filepath.Join(render.UnderRoot(c.Root, dest), "kolla-customca-"+name), b, 0o644); err != nil {
			return fmt.Errorf("kolla: %w", err)
		}
	}
	return run(update)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
