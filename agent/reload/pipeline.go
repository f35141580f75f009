package reload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/google/shlex"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// Rendered is the service's whole config rendered in memory, not written.
type Rendered interface {
	Files() []render.File
	// Commit writes it over the live files (each atomically; a failure
	// undoes what it did).
	Commit() error
}

// Validation is a command that must accept a staged file before it is
// committed. Command is a text/template with .Staged (the staged file's
// path) and .Dest (the file's own path), both quoted, then split into words
// like a shell would.
type Validation struct {
	Dest    string
	Command string
}

// Outcome of one reload pass, as counted and reported.
const (
	OutcomeUnchanged  = "unchanged"   // the render equals the running config
	OutcomeSkipped    = "skipped"     // a config already rejected or rolled back
	OutcomeFailed     = "failed"      // rendering or staging failed: nothing changed
	OutcomeRejected   = "rejected"    // a check refused it: nothing changed
	OutcomeApplied    = "applied"     // committed, acted on, verified
	OutcomeRolledBack = "rolled-back" // committed, failed verification, the last good config restored
)

// Config is how a Reloader renders, checks, acts and verifies.
type Config struct {
	// Render renders the config into memory.
	Render func(ctx context.Context) (Rendered, error)
	// Validations run on the staged files, after the built-in syntax check.
	Validations []Validation
	// Exec runs a validator and returns its combined output; err is non-nil
	// when it did not exit 0.
	Exec func(ctx context.Context, argv []string) (string, error)
	// ValidateTimeout bounds each validator; default 30s.
	ValidateTimeout time.Duration
	// Act makes the service take the committed files (hash: the set's,
	// changed: their paths): a signal, a restart, a rollout. Nil: nothing
	// to do.
	Act func(ctx context.Context, hash string, changed []string) error
	// Hold, when set, is called before acting on changed and holds what
	// bounds how many replicas act at once; release is called once the
	// service is verified (or not). Nil: nothing to hold.
	Hold func(ctx context.Context, changed []string) (release func(), err error)
	// Verify waits until the service is ready after a change made at since;
	// it returns an error when ctx ends first. Nil: nothing to wait for.
	Verify func(ctx context.Context, since time.Time) error
	// VerifyTimeout bounds Verify (Settled's wait included); default 60s.
	VerifyTimeout time.Duration
	// Settled, when set, is called just before acting on changed; the wait
	// it returns (nil: none) ends when the service has taken the change,
	// and Verify counts looks from the time it returns.
	Settled func(changed []string) func(ctx context.Context) time.Time
	// Gate, with a reason, marks a reload of changed being acted on and
	// verified; with "" it clears that.
	Gate func(changed []string, reason string)
	// Report is told every outcome but "unchanged": outcome, the hash, and
	// a message for people (an Event).
	Report func(outcome, hash, msg string)
	// StateDir keeps the sets, the applied and good hashes, the bad ones.
	StateDir string
	Logger   *slog.Logger
}

// Reloader takes a service from one rendered config to the next.
type Reloader struct {
	cfg    Config
	st     state
	log    *slog.Logger
	warned map[string]bool // validator dests said to match nothing
}

// New checks cfg and creates the state directory.
func New(cfg Config) (*Reloader, error) {
	if cfg.Render == nil {
		return nil, errors.New("reload: no Render")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("reload: no state directory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ValidateTimeout <= 0 {
		cfg.ValidateTimeout = 30 * time.Second
	}
	if cfg.VerifyTimeout <= 0 {
		cfg.VerifyTimeout = 60 * time.Second
	}
	if len(cfg.Validations) > 0 && cfg.Exec == nil {
		return nil, errors.New("reload: validations need Exec")
	}
	for _, v := range cfg.Validations {
		if _, err := validatorArgs(v.Command, "/staged", v.Dest); err != nil {
			return nil, fmt.Errorf("reload: validate %s: %w", v.Dest, err)
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("reload: state directory: %w", err)
	}
	return &Reloader{cfg: cfg, st: state{dir: cfg.StateDir}, log: cfg.Logger, warned: map[string]bool{}}, nil
}

// ErrNoService is what Act returns when there is no service process to act
// on: in sidecar mode, before the service's container has started. The
// committed config is then simply what the service starts with: nothing to
// signal, nothing to verify, and nothing wrong with the config.
var ErrNoService = errors.New("the service's process is not found")

// errActing marks a failure to act on the service (signal, restart): the
// service's or the agent's trouble, not the config's, so the config is not
// remembered as refused.
type errActing struct{ err error }

func (e errActing) Error() string { return "acting: " + e.err.Error() }
func (e errActing) Unwrap() error { return e.err }

// Applied is the hash of the config the service runs with ("" unknown).
func (r *Reloader) Applied() string { return r.st.read("applied") }

// Started records files, just rendered and committed before the service
// started, as the running config and the last good one. A reload cut off
// by the agent's death is over: the start wrote one whole set.
func (r *Reloader) Started(files []render.File) error {
	h := render.Hash(files)
	if err := r.st.stage(h, files); err != nil {
		return fmt.Errorf("reload: keeping the running config: %w", err)
	}
	for _, kv := range [][2]string{{"applied", h}, {"good", h}, {"pending", ""}} {
		if err := r.st.write(kv[0], kv[1]); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
	}
	r.st.prune(h)
	return nil
}

// Recover finishes a reload the agent's death cut off between commit and
// verdict (sidecar mode: the service kept running on what was written): the
// last good set is written back whole and acted on, so the service runs on
// the old set or, after the next pass, the new one, never a mix.
func (r *Reloader) Recover(ctx context.Context) error {
	pending := r.st.read("pending")
	if pending == "" {
		return nil
	}
	good := r.st.read("good")
	files, err := r.st.load(good)
	if err != nil {
		return fmt.Errorf("reload: a reload to %s was cut off and the last good config %s cannot be read: %w", pending, good, err)
	}
	r.log.Warn("reload: a reload was cut off by the agent's end; restoring the last good config", "cut_off", pending, "good", good)
	if err := render.WriteFiles(files); err != nil {
		return fmt.Errorf("reload: restoring %s: %w", good, err)
	}
	if r.cfg.Act != nil {
		if err := r.cfg.Act(ctx, good, paths(files)); err != nil {
			r.log.Warn("reload: acting on the restored config", "error", err.Error())
		}
	}
	r.st.write("applied", good)
	return r.st.write("pending", "")
}

// Reload renders the config and, if it differs from the running one, takes
// the service to it: stage -> check -> commit -> act -> verify, or back to
// the last good config. It returns the outcome.
func (r *Reloader) Reload(ctx context.Context) (string, error) {
	rd, err := r.cfg.Render(ctx)
	if err != nil {
		r.report(OutcomeFailed, "", fmt.Sprintf("the new config does not render; the service keeps its config: %v", err))
		return OutcomeFailed, err
	}
	files := rd.Files()
	hash := render.Hash(files)
	applied := r.Applied()
	switch {
	case hash == applied:
		r.log.Debug("reload: the config renders as the running one; nothing to do", "hash", hash)
		return OutcomeUnchanged, nil
	case r.st.isBad(hash):
		// The source says one config, the service runs another: a drift
		// an operator must see (log, Event, the outcome metric), each time
		// the source changes to it.
		r.report(OutcomeSkipped, hash, fmt.Sprintf("the config %s was refused before; the service stays on %s until the config changes", hash, applied))
		return OutcomeSkipped, nil
	}
	good := r.st.read("good")
	goodFiles, _ := r.st.load(good) // none: the first reload since an unrecorded start

	if err := r.st.stage(hash, files); err != nil {
		r.st.prune(good, applied)
		err = fmt.Errorf("staging in %s: %w", r.cfg.StateDir, err)
		r.report(OutcomeFailed, hash, "the new config could not be staged; the service keeps its config: "+err.Error())
		return OutcomeFailed, err
	}
	if err := r.check(ctx, hash, files, goodFiles); err != nil {
		r.st.markBad(hash)
		r.st.prune(good, applied)
		r.report(OutcomeRejected, hash, "the new config was rejected; the service keeps its config: "+err.Error())
		return OutcomeRejected, err
	}
	changed := diff(goodFiles, files)
	if err := r.st.write("pending", hash); err != nil {
		return OutcomeFailed, fmt.Errorf("reload: %w", err)
	}
	if err := rd.Commit(); err != nil {
		r.st.write("pending", "")
		r.report(OutcomeFailed, hash, "the new config could not be written; the service keeps its config: "+err.Error())
		return OutcomeFailed, err
	}
	r.st.write("applied", hash)
	r.log.Info("reload: new config committed", "hash", hash, "changed", strings.Join(changed, ","))
	err = r.actAndVerify(ctx, hash, changed, "reload "+hash)
	// No service yet (a native sidecar renders before the service's
	// container runs): it starts on this config, which is good as it is.
	noService := errors.Is(err, ErrNoService)
	if err == nil || noService {
		r.st.write("good", hash)
		r.st.write("pending", "")
		r.st.prune(hash)
		if noService {
			r.log.Info("reload: the service is not running; it will start on this config", "hash", hash)
		} else {
			r.report(OutcomeApplied, hash, fmt.Sprintf("config %s applied (%s)", hash, strings.Join(changed, ", ")))
		}
		return OutcomeApplied, nil
	}
	if ctx.Err() != nil {
		return OutcomeFailed, ctx.Err() // stopping: the next start takes it from here
	}
	// Back to the last good config. Only a config the service really
	// failed on is remembered as refused: one that could not be acted on
	// (the signal or restart failed) may be tried again.
	if !errors.As(err, new(errActing)) {
		r.st.markBad(hash)
	}
	if goodFiles == nil {
		r.st.write("pending", "")
		r.report(OutcomeRolledBack, hash, fmt.Sprintf("config %s failed verification (%v), and there is no earlier good config to go back to", hash, err))
		return OutcomeRolledBack, err
	}
	if werr := render.WriteFiles(goodFiles); werr != nil {
		r.report(OutcomeRolledBack, hash, fmt.Sprintf("config %s failed verification (%v); writing back %s failed: %v", hash, err, good, werr))
		return OutcomeRolledBack, errors.Join(err, werr)
	}
	removeAdded(goodFiles, files)
	r.st.write("applied", good)
	verr := r.actAndVerify(ctx, good, changed, "rollback to "+good)
	r.st.write("pending", "")
	r.st.prune(good)
	msg := fmt.Sprintf("config %s failed verification (%v); rolled back to %s", hash, err, good)
	if verr != nil {
		msg += fmt.Sprintf(", which is not ready either: %v", verr)
	}
	r.report(OutcomeRolledBack, hash, msg)
	return OutcomeRolledBack, err
}

// actAndVerify acts on the changed files and waits for readiness, with the
// gate set meanwhile.
func (r *Reloader) actAndVerify(ctx context.Context, hash string, changed []string, what string) error {
	if r.cfg.Hold != nil {
		release, err := r.cfg.Hold(ctx, changed)
		if err != nil {
			return fmt.Errorf("waiting for a turn: %w", err)
		}
		defer release()
	}
	if r.cfg.Gate != nil {
		r.cfg.Gate(changed, what)
		defer r.cfg.Gate(changed, "")
	}
	var settled func(context.Context) time.Time
	if r.cfg.Settled != nil {
		settled = r.cfg.Settled(changed)
	}
	since := time.Now()
	if r.cfg.Act != nil {
		if err := r.cfg.Act(ctx, hash, changed); errors.Is(err, ErrNoService) {
			return err
		} else if err != nil {
			return errActing{err}
		}
	}
	if r.cfg.Verify == nil {
		return nil
	}
	vctx, cancel := context.WithTimeout(ctx, r.cfg.VerifyTimeout)
	defer cancel()
	if settled != nil {
		since = settled(vctx)
	}
	if err := r.cfg.Verify(vctx, since); err != nil {
		return fmt.Errorf("not ready within %v: %w", r.cfg.VerifyTimeout, err)
	}
	return nil
}

// check runs the built-in syntax check on the staged files, then the
// validators of the files that have one. JSON and YAML files are always
// checked. An INI name (.conf, .ini, .cfg) is no proof of oslo.config's
// dialect (Apache's, HAProxy's, RabbitMQ's, ceph's files share it), so such
// a file is held to oslo's rules only when its running version follows
// them: a file oslo.config could read must stay readable.
func (r *Reloader) check(ctx context.Context, hash string, files, good []render.File) error {
	was := map[string][]byte{}
	for _, f := range good {
		was[f.Path] = f.Data
	}
	for _, f := range files {
		if isINI(f.Path) {
			old, ok := was[f.Path]
			if !ok || CheckSyntax(f.Path, old) != nil {
				continue
			}
		}
		if err := CheckSyntax(f.Path, f.Data); err != nil {
			return err
		}
	}
	for _, v := range r.cfg.Validations {
		var f *render.File
		for i := range files {
			if files[i].Path == v.Dest {
				f = &files[i]
			}
		}
		if f == nil {
			if !r.warned[v.Dest] {
				r.warned[v.Dest] = true
				r.log.Warn("reload: a validator's dest is not a file the config renders: it never runs", "dest", v.Dest)
			}
			continue
		}
		argv, err := validatorArgs(v.Command, r.st.staged(hash, *f), f.Path)
		if err != nil {
			return fmt.Errorf("validate %s: %w", v.Dest, err)
		}
		vctx, cancel := context.WithTimeout(ctx, r.cfg.ValidateTimeout)
		out, err := r.cfg.Exec(vctx, argv)
		cancel()
		if err != nil {
			if o := strings.TrimSpace(out); o != "" && !strings.Contains(err.Error(), o) {
				return fmt.Errorf("%s: %s refused it: %v: %s", v.Dest, argv[0], err, o)
			}
			return fmt.Errorf("%s: %s refused it: %v", v.Dest, argv[0], err)
		}
	}
	return nil
}

func isINI(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".conf", ".ini", ".cfg":
		return true
	}
	return false
}

// validatorArgs fills a validator's command in and splits it into words.
func validatorArgs(cmd, staged, dest string) ([]string, error) {
	t, err := template.New("").Option("missingkey=error").Parse(cmd)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := t.Execute(&b, map[string]string{"Staged": quote(staged), "Dest": quote(dest)}); err != nil {
		return nil, err
	}
	argv, err := shlex.Split(b.String())
	if err == nil && len(argv) == 0 {
		err = errors.New("empty command")
	}
	return argv, err
}

// quote makes s one word for shlex.Split, whatever it holds.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }

func (r *Reloader) report(outcome, hash, msg string) {
	switch outcome {
	case OutcomeApplied:
		r.log.Info("reload: "+msg, "outcome", outcome, "hash", hash)
	default:
		r.log.Warn("reload: "+msg, "outcome", outcome, "hash", hash)
	}
	if r.cfg.Report != nil {
		r.cfg.Report(outcome, hash, msg)
	}
}

func paths(files []render.File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// diff lists the paths whose file differs between the sets (content, mode,
// owner), or is in only one.
func diff(old, cur []render.File) []string {
	was := map[string]render.File{}
	for _, f := range old {
		was[f.Path] = f
	}
	var out []string
	for _, f := range cur {
		o, ok := was[f.Path]
		if !ok || !bytes.Equal(o.Data, f.Data) || o.Mode != f.Mode || o.UID != f.UID || o.GID != f.GID {
			out = append(out, f.Path)
		}
		delete(was, f.Path)
	}
	for p := range was {
		out = append(out, p)
	}
	return out
}

// removeAdded removes the files the rolled-back set wrote where the good
// set has none.
func removeAdded(good, bad []render.File) {
	had := map[string]bool{}
	for _, f := range good {
		had[f.Path] = true
	}
	for _, f := range bad {
		if !had[f.Path] {
			os.Remove(f.Host)
		}
	}
}
