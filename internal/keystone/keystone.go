package keystone

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/kolla-agent/kolla-agent/certs"
)

// The Debian binaries and files this package runs, by absolute path.
const (
	KeystoneManage = "/usr/bin/keystone-manage"
	WSGIPublic     = "/usr/bin/keystone-wsgi-public" // the WSGI script uWSGI loads
	UWSGI          = "/usr/bin/uwsgi-core"
	PluginsDir     = "/usr/lib/uwsgi/plugins"
)

// Bootstrap identity created by Prepare (keystone-manage bootstrap), in the
// Default domain: user AdminUser with role "admin" on project AdminProject.
const (
	AdminUser     = "admin"
	AdminProject  = "admin"
	AdminPassword = "kolla-agent-test"
)

// prepareTimeout bounds each keystone-manage run.
const prepareTimeout = 3 * time.Minute

// Instance is a keystone configuration under Dir, ready to be served.
type Instance struct {
	Dir        string // absolute; everything keystone reads or writes is under it
	ConfigFile string // Dir/keystone.conf
	ConfigDir  string // Dir/keystone.conf.d: empty, passed as --config-dir
	LogFile    string // keystone's own log (keystone-manage and the WSGI app)
	// Processes is the number of uWSGI workers Command asks for (default 2).
	Processes int
	// TLS, when set, makes uWSGI serve HTTPS (its --https router) with
	// this certificate, signed by the CA in CA; Server.URL is then https.
	TLS *TLSFiles
}

// TLSFiles are PEM files: the server's certificate and key, and the CA that
// signed it (what a client must trust).
type TLSFiles struct{ CA, Cert, Key string }

// required lists what must be installed, with the Debian package providing it.
var required = [][2]string{
	{KeystoneManage, "python3-keystone"},
	{WSGIPublic, "python3-keystone"},
	{UWSGI, "uwsgi-core"},
	{filepath.Join(PluginsDir, "http_plugin.so"), "uwsgi-core"},
	{filepath.Join(PluginsDir, "python3_plugin.so"), "uwsgi-plugin-python3"},
}

// CheckInstalled reports every missing binary or plugin in one error naming
// the Debian packages to install.
func CheckInstalled() error {
	var missing []string
	for _, r := range required {
		if _, err := os.Stat(r[0]); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", r[0], r[1]))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("keystone test tooling: missing %s; install them with hack/install-tools.sh "+
			"(apt-get install python3-keystone uwsgi-core uwsgi-plugin-python3)", strings.Join(missing, ", "))
	}
	return nil
}

// Prepare writes a self-contained keystone config under dir: keystone.conf with
// [database] connection = sqlite:////DIR/keystone.db, fernet and credential key
// repositories under dir (keystone-manage fernet_setup / credential_setup with
// --keystone-user/--keystone-group of the current user), logging to
// dir/log/keystone.log, then runs `keystone-manage db_sync` and
// `keystone-manage bootstrap` (user AdminUser, password AdminPassword) so
// /v3/auth/tokens works. The two independent chains (keys; database) run in
// parallel. It is slow (seconds): callers do it once per test package and
// share the result; an Instance may serve several uWSGI instances at once on
// different ports.
func Prepare(dir string) (*Instance, error) {
	if err := CheckInstalled(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	i := &Instance{
		Dir:        dir,
		ConfigFile: filepath.Join(dir, "keystone.conf"),
		ConfigDir:  filepath.Join(dir, "keystone.conf.d"),
		LogFile:    filepath.Join(dir, "log", "keystone.log"),
		Processes:  2,
	}
	for _, d := range []string{i.ConfigDir, filepath.Dir(i.LogFile)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(i.ConfigFile, []byte(i.config()), 0o644); err != nil {
		return nil, err
	}

	owner, err := keyOwner()
	if err != nil {
		return nil, err
	}
	chains := [][][]string{
		{
			append([]string{"fernet_setup"}, owner...),
			append([]string{"credential_setup"}, owner...),
		},
		{
			{"db_sync"},
			{"bootstrap", "--bootstrap-password", AdminPassword,
				"--bootstrap-username", AdminUser, "--bootstrap-project-name", AdminProject},
		},
	}
	errs := make([]error, len(chains))
	var wg sync.WaitGroup
	for n, chain := range chains {
		wg.Go(func() {
			for _, args := range chain {
				if err := i.manage(args...); err != nil {
					errs[n] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Write-ahead logging, kept in the database file: without it a reader
	// that keystone leaves open locks every write out ("database is
	// locked" after sqlite's busy timeout), and the API can read but not
	// write.
	wal := exec.Command("/usr/bin/python3", "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode=WAL').fetchone()[0])", filepath.Join(dir, "keystone.db"))
	if out, err := wal.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "wal" {
		return nil, fmt.Errorf("keystone: journal_mode=WAL: %v: %s", err, out)
	}
	return i, nil
}

// config is keystone.conf. Every option whose default is a path under
// /etc/keystone and that this setup can reach points under Dir instead.
func (i *Instance) config() string {
	d := i.Dir
	return `# Written by kolla-agent internal/keystone.Prepare for tests.
[DEFAULT]
log_dir = ` + filepath.Dir(i.LogFile) + `
log_file = ` + filepath.Base(i.LogFile) + `
use_stderr = false
debug = false

[database]
connection = sqlite:///` + filepath.Join(d, "keystone.db") + `

[token]
provider = fernet

[fernet_tokens]
key_repository = ` + filepath.Join(d, "fernet-keys") + `

[fernet_receipts]
key_repository = ` + filepath.Join(d, "fernet-keys") + `

[credential]
key_repository = ` + filepath.Join(d, "credential-keys") + `

[identity]
domain_config_dir = ` + filepath.Join(d, "domains") + `
# bcrypt's minimum cost: bootstrap and every token request hash the password.
password_hash_algorithm = bcrypt
password_hash_rounds = 4

[oslo_policy]
# Absent on purpose: keystone then uses its in-code default policies.
policy_file = ` + filepath.Join(d, "policy.yaml") + `

[cache]
enabled = false
`
}

// keyOwner returns --keystone-user/--keystone-group naming the current user
// and group. keystone-manage requires them as root; as another user they are
// optional, and left out when the user has no name (a random container UID).
func keyOwner() ([]string, error) {
	u, uerr := user.Current()
	var g *user.Group
	var gerr error
	if uerr == nil {
		g, gerr = user.LookupGroupId(u.Gid)
	}
	if uerr != nil || gerr != nil {
		if os.Getuid() == 0 {
			return nil, fmt.Errorf("keystone: cannot name the current user for keystone-manage --keystone-user: %w",
				errors.Join(uerr, gerr))
		}
		return nil, nil
	}
	return []string{"--keystone-user", u.Username, "--keystone-group", g.Name}, nil
}

// manage runs keystone-manage with the Instance's config and environment.
func (i *Instance) manage(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	argv := append([]string{"--config-file", i.ConfigFile, "--config-dir", i.ConfigDir}, args...)
	cmd := exec.CommandContext(ctx, KeystoneManage, argv...)
	cmd.Dir = i.Dir
	cmd.Env = i.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("keystone-manage %s: %w\n%s%s", args[0], err, out, tail(i.LogFile, 4096))
	}
	return nil
}

// Env is the complete environment for keystone-manage and the uWSGI command:
// not derived from this process' environment, so that a PYTHONPATH or
// PYTHONHOME meant for another interpreter cannot reach Debian's Python.
// HOME is Dir, so oslo.config's ~/.keystone lookups stay inside it.
func (i *Instance) Env() []string {
	return []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + i.Dir,
		"LANG=C.UTF-8",
		"PYTHONDONTWRITEBYTECODE=1",
		// Read by keystone/server/flask/core.py _get_config_files: the WSGI
		// app loads DIR/FILE for each FILE (';'-separated) of the second.
		"OS_KEYSTONE_CONFIG_DIR=" + i.Dir,
		"OS_KEYSTONE_CONFIG_FILES=" + filepath.Base(i.ConfigFile),
	}
}

// Command is the uWSGI command line that serves keystone's public WSGI app on
// 127.0.0.1:port, as kolla-ansible's service-uwsgi-config template configures
// it (http router, master, lazy-apps, die-on-term with the graceful SIGTERM
// hook), with i.Processes workers. Differences from kolla: Debian's
// uwsgi-core has the HTTP router as a plugin, so it loads "http,python3"
// rather than "python3"; it runs as the current user (no uid); it logs to its
// stderr rather than logto2; --need-app makes a keystone that cannot load its
// app exit instead of serving errors; and --pyargv hands keystone an explicit
// --config-dir. The master's PID is the one to send SIGTERM to; to freeze
// keystone, stop the whole process group (see the package comment).
func (i *Instance) Command(port int) []string {
	return []string{
		UWSGI,
		"--plugins-dir", PluginsDir,
		"--plugins", "http,python3",
		i.listen(port)[0], i.listen(port)[1],
		"--wsgi-file", WSGIPublic,
		"--master",
		"--processes", strconv.Itoa(i.processes()),
		"--die-on-term",
		"--hook-master-start", "unix_signal:15 gracefully_kill_them_all",
		"--lazy-apps",
		"--enable-threads",
		"--thunder-lock",
		"--buffer-size", "65535",
		"--add-header", "Connection: close",
		"--worker-reload-mercy", "80",
		"--need-app",
		"--pyargv", "--config-dir " + i.ConfigDir,
	}
}

// listen is uWSGI's router option: --http ADDR, or --https ADDR,CERT,KEY.
func (i *Instance) listen(port int) [2]string {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if i.TLS != nil {
		return [2]string{"--https", addr + "," + i.TLS.Cert + "," + i.TLS.Key}
	}
	return [2]string{"--http", addr}
}

func (i *Instance) processes() int {
	if i.Processes < 1 {
		return 2
	}
	return i.Processes
}

// FreePort returns a free loopback TCP port. Another process may take it
// before the caller binds it; uWSGI then exits at once (bind error), which
// WaitV3 with Server.Exited notices.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitV3 polls GET http://127.0.0.1:port/v3 until it answers 200 and returns
// the body. It gives up when ctx ends or, if exited is not nil, when it is
// closed (the server died), with an error saying what it saw last.
func WaitV3(ctx context.Context, port int, exited <-chan struct{}) ([]byte, error) {
	return waitV3(ctx, "http://127.0.0.1:"+strconv.Itoa(port), nil, exited)
}

// waitV3 is WaitV3 for base (http or https, trusting roots).
func waitV3(ctx context.Context, base string, roots *x509.CertPool, exited <-chan struct{}) ([]byte, error) {
	url := base + "/v3"
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
	last := errors.New("no answer yet")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		body, err := getOK(ctx, client, url)
		if err == nil {
			return body, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("GET %s did not answer 200: %w (last: %v)", url, ctx.Err(), last)
		case <-exited:
			return nil, fmt.Errorf("GET %s: the server exited (last: %v)", url, last)
		case <-tick.C:
		}
	}
}

func getOK(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s: %.200s", resp.Status, body)
	}
	return body, nil
}

// Server is uWSGI serving keystone as a child of the test, started by Start.
type Server struct {
	Port int
	URL  string // http://127.0.0.1:PORT
	Pid  int    // the uWSGI master; also the process group ID
	Log  string // uWSGI's stdout and stderr (its own log and the app's warnings)

	processes int            // workers asked for
	roots     *x509.CertPool // the CA of an https server
	done      chan struct{}
	state     *os.ProcessState // valid once done is closed
	err       error            // cmd.Wait's error, valid once done is closed
}

// Start runs i.Command(port) (a FreePort when port is 0) as a child of the
// test in its own process group, with output to Dir/uwsgi-PORT.log, and
// returns at once: use s.WaitReady. When the test ends the whole group is
// killed (SIGKILL works on stopped processes too) and the master reaped; on
// failure the end of the log is written to the test log. The master also
// gets SIGKILL if the test binary dies without cleaning up; its workers and
// router notice their master's death and exit within a few seconds.
func (i *Instance) Start(t testing.TB, port int) *Server {
	t.Helper()
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	scheme := "http://"
	var roots *x509.CertPool
	if i.TLS != nil {
		scheme = "https://"
		var err error
		if roots, err = certs.Pool(i.TLS.CA); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{
		Port:  port,
		URL:   scheme + "127.0.0.1:" + strconv.Itoa(port),
		roots: roots,
		Log:   filepath.Join(i.Dir, "uwsgi-"+strconv.Itoa(port)+".log"),

		processes: i.processes(),
		done:      make(chan struct{}),
	}
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	argv := i.Command(port)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = i.Dir
	cmd.Env = i.Env()
	cmd.Stdout = logf // an *os.File goes to the child as is: no copying goroutine
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start uWSGI: %v", err)
	}
	s.Pid = cmd.Process.Pid
	go func() {
		s.err = cmd.Wait()
		s.state = cmd.ProcessState
		close(s.done)
	}()
	t.Cleanup(func() {
		// The group outlives its leader when workers linger: kill it even
		// after the master has been reaped.
		_ = syscall.Kill(-s.Pid, syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Errorf("uWSGI master %d not reaped 10s after SIGKILL", s.Pid)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(s.Group()) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if left := s.Group(); len(left) > 0 {
			t.Errorf("uWSGI processes %v still alive after SIGKILL to group %d", left, s.Pid)
		}
		if t.Failed() {
			t.Logf("end of %s:\n%s", s.Log, tail(s.Log, 8192))
		}
	})
	return s
}

// WaitReady waits, for at most d, until /v3 answers 200 (WaitV3) and every
// worker has loaded keystone, and returns the body. It fails at once if the
// master exits.
//
// The first 200 comes from the first worker to load (--lazy-apps loads the app
// in each worker after the fork). Waiting for all of them matters: a worker
// that receives uWSGI's graceful-kill SIGHUP while still loading ignores it
// once loaded, so a SIGTERM sent then makes the master wait the whole
// --worker-reload-mercy (80 s, kolla's value) before it SIGKILLs the worker
// ("NO MERCY") and exits 0.
func (s *Server) WaitReady(d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	body, err := waitV3(ctx, s.URL, s.roots, s.done)
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n := s.LoadedWorkers()
		if n >= s.processes {
			return body, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("/v3 answers, but only %d of %d uWSGI workers loaded keystone: %w", n, s.processes, ctx.Err())
		case <-s.done:
			return nil, errors.New("uWSGI exited while its workers were loading keystone")
		case <-tick.C:
		}
	}
}

// appReady is the line a uWSGI worker logs once it has loaded the WSGI app.
var appReady = regexp.MustCompile(`WSGI app \d+ \(mountpoint='[^']*'\) ready in .* pid: (\d+)`)

// LoadedWorkers counts the live processes of the group that uWSGI's log says
// have loaded keystone (a respawned worker counts once it has loaded again).
func (s *Server) LoadedWorkers() int {
	log, err := os.ReadFile(s.Log)
	if err != nil {
		return 0
	}
	live := s.Group()
	n := 0
	seen := map[int]bool{}
	for _, m := range appReady.FindAllSubmatch(log, -1) {
		pid, _ := strconv.Atoi(string(m[1]))
		if !seen[pid] && slices.Contains(live, pid) {
			seen[pid] = true
			n++
		}
	}
	return n
}

// Exited is closed when the master has exited and been reaped.
func (s *Server) Exited() <-chan struct{} { return s.done }

// Wait waits at most d for the master to exit and returns its state.
func (s *Server) Wait(d time.Duration) (*os.ProcessState, error) {
	select {
	case <-s.done:
		var exitErr *exec.ExitError
		if s.err != nil && !errors.As(s.err, &exitErr) {
			return s.state, s.err
		}
		return s.state, nil
	case <-time.After(d):
		return nil, fmt.Errorf("uWSGI master %d still running after %v", s.Pid, d)
	}
}

// Signal sends sig to the master only.
func (s *Server) Signal(sig syscall.Signal) error { return syscall.Kill(s.Pid, sig) }

// SignalGroup sends sig to every process of the group: master, workers and
// the HTTP router.
func (s *Server) SignalGroup(sig syscall.Signal) error { return syscall.Kill(-s.Pid, sig) }

// Group returns the PIDs of the live (not zombie) processes in the server's
// process group, master first when it is alive.
func (s *Server) Group() []int {
	var pids []int
	for _, p := range groupProcs(s.Pid) {
		if p.PID == s.Pid {
			pids = append([]int{p.PID}, pids...)
		} else {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// Memory is the resident memory of the server's processes, from
// /proc/PID/status: RSS now (VmRSS) and each process' peak (VmHWM), summed.
type Memory struct {
	Processes int
	RSS, Peak uint64 // bytes
}

// Memory sums VmRSS and VmHWM over the live processes of the group.
func (s *Server) Memory() (Memory, error) {
	var m Memory
	for _, p := range groupProcs(s.Pid) {
		st, err := p.NewStatus()
		if err != nil {
			continue // exited meanwhile
		}
		m.Processes++
		m.RSS += st.VmRSS
		m.Peak += st.VmHWM
	}
	if m.Processes == 0 {
		return m, fmt.Errorf("no live process in group %d", s.Pid)
	}
	return m, nil
}

// groupProcs lists the live, non-zombie processes whose process group is pgid.
func groupProcs(pgid int) []procfs.Proc {
	all, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	var out []procfs.Proc
	for _, p := range all {
		st, err := p.Stat()
		if err != nil || st.PGRP != pgid || st.State == "Z" || st.State == "X" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// tail returns at most the last n bytes of the file at path.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// Clone copies the instance (config, database, keys) into dir, for a test
// that damages it (a dropped table makes keystone log a traceback) without
// touching the package's shared instance. No keystone may be writing to i
// meanwhile.
func (i *Instance) Clone(dir string) (*Instance, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c := &Instance{
		Dir:        dir,
		ConfigFile: filepath.Join(dir, "keystone.conf"),
		ConfigDir:  filepath.Join(dir, "keystone.conf.d"),
		LogFile:    filepath.Join(dir, "log", "keystone.log"),
		Processes:  i.Processes,
	}
	err = filepath.WalkDir(i.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(i.Dir, p)
		to := filepath.Join(dir, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case p == i.ConfigFile || filepath.Dir(p) == filepath.Dir(i.LogFile):
			return nil // written below; a fresh log
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, info.Mode().Perm())
	})
	if err != nil {
		return nil, fmt.Errorf("keystone: clone: %w", err)
	}
	if err := os.WriteFile(c.ConfigFile, []byte(c.config()), 0o644); err != nil {
		return nil, err
	}
	return c, nil
}
