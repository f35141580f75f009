package reload

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// fakeRender renders files from a map (path -> content) under root, as the
// agent's render would, and commits them with the render package's writer.
type fakeRender struct {
	root  string
	files map[string]string
	err   error
}

type fakeRendered struct{ files []render.File }

func (f fakeRendered) Files() []render.File { return f.files }
func (f fakeRendered) Commit() error        { return render.WriteFiles(f.files) }

func (f *fakeRender) render(context.Context) (Rendered, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []render.File
	for p, c := range f.files {
		out = append(out, render.File{Path: p, Host: filepath.Join(f.root, p), Data: []byte(c), Mode: 0o640, UID: -1, GID: -1})
	}
	return fakeRendered{out}, nil
}

type pipe struct {
	t       *testing.T
	fr      *fakeRender
	r       *Reloader
	acts    [][]string
	ready   bool // what Verify says
	reports []string
	state   string
}

func newPipe(t *testing.T, files map[string]string, vals ...Validation) *pipe {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/keystone"), 0o755)
	os.MkdirAll(filepath.Join(root, "etc/apache2"), 0o755)
	p := &pipe{t: t, fr: &fakeRender{root: root, files: files}, ready: true, state: filepath.Join(t.TempDir(), "state")}
	var err error
	p.r, err = New(Config{
		Render:      p.fr.render,
		Validations: vals,
		Exec: func(ctx context.Context, argv []string) (string, error) {
			out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
			return string(out), err
		},
		Act: func(_ context.Context, _ string, changed []string) error {
			p.acts = append(p.acts, changed)
			return nil
		},
		Verify: func(ctx context.Context, _ time.Time) error {
			if p.ready {
				return nil
			}
			<-ctx.Done()
			return errors.New("api: 503")
		},
		VerifyTimeout: 100 * time.Millisecond,
		Report:        func(outcome, _, msg string) { p.reports = append(p.reports, outcome+": "+msg) },
		StateDir:      p.state,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The start: the render committed, the service started on it.
	rd, _ := p.fr.render(context.Background())
	if err := rd.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := p.r.Started(rd.Files()); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pipe) reload(want string) error {
	p.t.Helper()
	got, err := p.r.Reload(context.Background())
	if got != want {
		p.t.Fatalf("outcome %s (%v), want %s; reports %q", got, err, want, p.reports)
	}
	return err
}

func (p *pipe) live(path string) string {
	b, err := os.ReadFile(filepath.Join(p.fr.root, path))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

const goodConf = "[DEFAULT]\ndebug = false\n"

func TestReloadUnchangedDoesNothing(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	p.reload(OutcomeUnchanged)
	if len(p.acts) != 0 || len(p.reports) != 0 {
		t.Errorf("acts %v reports %v", p.acts, p.reports)
	}
	// Also after the agent's restart: the applied hash is in the state dir.
	r2, err := New(Config{Render: p.fr.render, StateDir: p.state})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r2.Reload(context.Background()); got != OutcomeUnchanged {
		t.Errorf("after a restart: %s", got)
	}
}

func TestReloadApplies(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf, "/etc/keystone/policy.yaml": "{}\n"})
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = true\n"
	p.reload(OutcomeApplied)
	if got := p.live("/etc/keystone/keystone.conf"); got != "[DEFAULT]\ndebug = true\n" {
		t.Errorf("live %q", got)
	}
	if len(p.acts) != 1 || strings.Join(p.acts[0], ",") != "/etc/keystone/keystone.conf" {
		t.Errorf("acted on %v, want the one changed file", p.acts)
	}
	st := state{p.state}
	if st.read("good") != p.r.Applied() || st.read("pending") != "" {
		t.Errorf("state: good %q applied %q pending %q", st.read("good"), p.r.Applied(), st.read("pending"))
	}
	p.reload(OutcomeUnchanged)
}

// Bad input never reaches the live files: a syntax error (the built-in INI
// check) or a validator that refuses the staged file. The refused config is
// remembered, so the next pass does not run the validators again.
func TestReloadRejects(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug true\n"
	err := p.reload(OutcomeRejected)
	if err == nil || !strings.Contains(err.Error(), "keystone.conf:2") {
		t.Errorf("error %v, want it to name keystone.conf:2", err)
	}
	if got := p.live("/etc/keystone/keystone.conf"); got != goodConf {
		t.Errorf("a rejected config reached the live file: %q", got)
	}
	p.reload(OutcomeSkipped)

	// A .conf that is not oslo's dialect (Apache's) is not held to it.
	ap := newPipe(t, map[string]string{"/etc/apache2/wsgi-keystone.conf": "Listen 5000\n"})
	ap.fr.files["/etc/apache2/wsgi-keystone.conf"] = "Listen 5001\n<VirtualHost *:5001>\n</VirtualHost>\n"
	ap.reload(OutcomeApplied)

	v := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf},
		Validation{Dest: "/etc/keystone/keystone.conf", Command: `grep -q "debug = false" {{ .Staged }}`})
	v.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = true\n"
	err = v.reload(OutcomeRejected)
	if err == nil || !strings.Contains(err.Error(), "grep refused it") {
		t.Errorf("error %v", err)
	}
	if got := v.live("/etc/keystone/keystone.conf"); got != goodConf {
		t.Errorf("a refused config reached the live file: %q", got)
	}
	if len(v.acts) != 0 || !strings.HasPrefix(v.reports[0], "rejected: ") {
		t.Errorf("acts %v reports %q", v.acts, v.reports)
	}
	// The validator passes the staged copy, not the live file.
	v.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = false\nadmin_token = x\n"
	v.reload(OutcomeApplied)
}

// A config that makes the service fail verification is rolled back: the
// last good files are written back (a file only the bad set had is
// removed), the service is acted on again, and the bad config is not
// retried until another change.
func TestReloadRollsBack(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = true\n"
	p.fr.files["/etc/keystone/extra.conf"] = "[DEFAULT]\n"
	p.ready = false
	p.reload(OutcomeRolledBack)
	if got := p.live("/etc/keystone/keystone.conf"); got != goodConf {
		t.Errorf("not rolled back: %q", got)
	}
	if _, err := os.Stat(filepath.Join(p.fr.root, "etc/keystone/extra.conf")); !os.IsNotExist(err) {
		t.Errorf("the file only the bad set had is still there: %v", err)
	}
	if len(p.acts) != 2 {
		t.Errorf("acted %d times, want 2 (the change, the rollback)", len(p.acts))
	}
	if r := strings.Join(p.reports, "\n"); !strings.Contains(r, "rolled-back: ") || !strings.Contains(r, "api: 503") {
		t.Errorf("reports %q", p.reports)
	}
	p.ready = true
	p.reload(OutcomeSkipped)
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = true\nverbose = true\n"
	p.reload(OutcomeApplied)
}

// The agent killed between commit and verdict (sidecar mode: the service
// ran on): Recover writes the last good set back whole.
func TestReloadRecoverAfterCutOff(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf, "/etc/keystone/b.conf": "[b]\n"})
	st := state{p.state}
	// What a SIGKILL after half the commit leaves: pending set, one file new.
	os.WriteFile(filepath.Join(p.fr.root, "etc/keystone/keystone.conf"), []byte("[DEFAULT]\ndebug = true\n"), 0o640)
	st.write("pending", "0123456789abcdef")
	if err := p.r.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.live("/etc/keystone/keystone.conf"); got != goodConf {
		t.Errorf("after recovery %q", got)
	}
	if st.read("pending") != "" || len(p.acts) != 1 {
		t.Errorf("pending %q acts %v", st.read("pending"), p.acts)
	}
}

// The staging disk full: the reload fails before anything is committed,
// says where, and the live config is untouched.
func TestReloadStagingDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(small, 0) })
	r, err := New(Config{Render: p.fr.render, StateDir: small, Act: func(context.Context, string, []string) error { t.Error("acted"); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\n# " + strings.Repeat("x", 64<<10) + "\n"
	got, err := r.Reload(context.Background())
	if got != OutcomeFailed || err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), small) {
		t.Errorf("outcome %s, error %v", got, err)
	}
	if live := p.live("/etc/keystone/keystone.conf"); live != goodConf {
		t.Errorf("live config changed: %q", live)
	}
}

// The first render of a native sidecar, before the service's container
// runs: nothing to signal and nothing to verify, and the config is the one
// the service starts on, not a refused one (REAL-PODS: it was rolled back
// and remembered as refused).
func TestReloadWithNoServiceYetIsTheStart(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	acts := 0
	p.r.cfg.Act = func(context.Context, string, []string) error { acts++; return ErrNoService }
	p.ready = false // would fail verification, were it run
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = true\n"
	p.reload(OutcomeApplied)
	if acts != 1 || p.r.st.read("good") != p.r.Applied() || p.r.st.isBad(p.r.Applied()) {
		t.Errorf("acts %d, good %q, applied %q, bad %q", acts, p.r.st.read("good"), p.r.Applied(), p.r.st.read("bad"))
	}
	if got := p.live("/etc/keystone/keystone.conf"); got != "[DEFAULT]\ndebug = true\n" {
		t.Errorf("live config %q", got)
	}
}

// A config that could not be acted on (the signal failed) is rolled back
// but not remembered as refused: the same config is tried again. One the
// service really failed on is, and a source that returns to it is a drift
// that is reported, not silently skipped.
func TestReloadRemembersOnlyConfigsThatFailed(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	v2 := "[DEFAULT]\ndebug = true\n"
	fail := errors.New("kill: operation not permitted")
	p.r.cfg.Act = func(context.Context, string, []string) error { return fail }
	p.fr.files["/etc/keystone/keystone.conf"] = v2
	if err := p.reload(OutcomeRolledBack); !errors.Is(err, fail) {
		t.Errorf("err %v, want the act's", err)
	}
	p.r.cfg.Act = func(context.Context, string, []string) error { return nil }
	p.reload(OutcomeApplied) // tried again, not skipped

	p.ready = false // v3: the service is not ready on it
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = false\nverbose = true\n"
	p.reload(OutcomeRolledBack)
	p.ready = true
	p.reports = nil
	p.reload(OutcomeSkipped)
	if len(p.reports) != 1 || !strings.HasPrefix(p.reports[0], OutcomeSkipped+": ") || !strings.Contains(p.reports[0], "refused before") {
		t.Errorf("reports %q, want one skipped report saying the config was refused before", p.reports)
	}
}

// Settled is asked before the action, for the changed files, and Verify
// counts its looks from the time its wait returns, not from the action.
func TestReloadVerifiesFromSettled(t *testing.T) {
	p := newPipe(t, map[string]string{"/etc/keystone/keystone.conf": goodConf})
	var order []string
	var since time.Time
	settledAt := time.Now().Add(time.Hour)
	p.r.cfg.Settled = func(changed []string) func(context.Context) time.Time {
		order = append(order, "settled "+strings.Join(changed, ","))
		return func(context.Context) time.Time {
			order = append(order, "wait")
			return settledAt
		}
	}
	act := p.r.cfg.Act
	p.r.cfg.Act = func(ctx context.Context, hash string, changed []string) error {
		order = append(order, "act")
		return act(ctx, hash, changed)
	}
	p.r.cfg.Verify = func(_ context.Context, s time.Time) error {
		order = append(order, "verify")
		since = s
		return nil
	}
	p.fr.files["/etc/keystone/keystone.conf"] = "[DEFAULT]\ndebug = true\n"
	p.reload(OutcomeApplied)
	if got := strings.Join(order, "; "); got != "settled /etc/keystone/keystone.conf; act; wait; verify" {
		t.Errorf("order: %s", got)
	}
	if !since.Equal(settledAt) {
		t.Errorf("verified from %v, want the settled time %v", since, settledAt)
	}
}
