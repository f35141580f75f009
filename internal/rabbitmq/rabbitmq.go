// Package rabbitmq runs a real RabbitMQ broker (Debian's rabbitmq-server) and
// real oslo.messaging RPC servers and clients (Debian's python3-oslo.messaging
// under /usr/bin/python3) for tests.
//
// What it guarantees:
//   - one broker per Start, owned by the test: its own node name, Erlang
//     cookie, epmd, data and log directories under the given directory, and
//     free loopback ports for AMQP, AMQP over TLS, Erlang distribution and
//     epmd; no plugins. Start returns once the broker accepts an AMQP login.
//   - a user with a password that needs URL-escaping (URL), and a TLS
//     listener whose certificate is signed by a CA of its own (CAFile) for
//     the name ServerName only, not for 127.0.0.1.
//   - Stop stops, by PID and process group, every process it started (the
//     broker with the helpers Erlang starts in sessions of their own, epmd,
//     the RPC servers); children get SIGKILL if the test binary dies.
//   - Down and Up (Restart) stop and start the broker on the same ports and
//     data, for reconnection tests.
//
// What it does not do: no clustering, no management plugin, no users or
// vhosts beyond the default ones, nothing reachable from outside the machine.
//
// Typical use, one broker per test package, started lazily by the first test
// that needs it and stopped by TestMain after m.Run.
package rabbitmq

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// Debian's scripts: /usr/sbin/rabbitmq-server and rabbitmqctl switch to
	// the rabbitmq user and its /var/lib/rabbitmq; these run as the caller.
	serverBin = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	ctlBin    = "/usr/lib/rabbitmq/bin/rabbitmqctl"
	// Python is Debian's: the python3 first on PATH may be another
	// interpreter without the python3-oslo.* packages.
	Python = "/usr/bin/python3"

	// ServerName is the only name the TLS listener's certificate is for.
	ServerName = "rabbitmq.test"

	bootTimeout = 120 * time.Second
	stopGrace   = 30 * time.Second
)

//go:embed rpcserver.py
var rpcServerPy []byte

//go:embed rpcclient.py
var rpcClientPy []byte

// Installed reports whether the broker, its CLI, epmd and Debian's Python
// with oslo.messaging are on this machine, and what is missing if not.
func Installed() (bool, string) {
	var missing []string
	for _, p := range []string{serverBin, ctlBin, Python, "/usr/lib/python3/dist-packages/oslo_messaging"} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := epmdPath(); err != nil {
		missing = append(missing, "epmd")
	}
	if len(missing) > 0 {
		return false, "not installed: " + strings.Join(missing, ", ") + " (run hack/install-tools.sh)"
	}
	return true, ""
}

func epmdPath() (string, error) {
	if p, err := exec.LookPath("epmd"); err == nil {
		return p, nil
	}
	const p = "/usr/lib/erlang/bin/epmd"
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// Server is one running broker.
type Server struct {
	Dir      string
	Node     string // rabbit-PID-RANDOM@localhost
	AMQPPort int
	TLSPort  int
	DistPort int
	EPMDPort int
	User     string
	Password string
	CAFile   string // the CA of the TLS listener's certificate
	BootTime time.Duration

	env []string

	mu      sync.Mutex
	epmd    *proc.Process
	broker  *proc.Process
	stdin   *os.File // the broker's stdin, held open: EOF makes Erlang halt
	rpc     map[*RPCServer]bool
	stopped bool
}

// Start starts a broker with its files in dir (which must exist).
func Start(dir string) (*Server, error) {
	if ok, why := Installed(); !ok {
		return nil, fmt.Errorf("rabbitmq: %s", why)
	}
	var err error
	for try := 0; try < 3; try++ {
		var s *Server
		if s, err = start(dir, try); err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortClash) {
			return nil, err
		}
	}
	return nil, err
}

var errPortClash = errors.New("port already in use")

func start(dir string, try int) (*Server, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Dir:      dir,
		Node:     fmt.Sprintf("rabbit-%d-%s@localhost", os.Getpid(), randomHex(3)),
		AMQPPort: ports[0], TLSPort: ports[1], DistPort: ports[2], EPMDPort: ports[3],
		User:     "kolla",
		Password: "s3cr@t:" + randomHex(6), // "@" and ":" need escaping in a URL ("/" breaks oslo.messaging 14: it re-quotes the password keeping "/")
		rpc:      map[*RPCServer]bool{},
	}
	if err := s.writeFiles(try); err != nil {
		return nil, err
	}
	epmdBin, err := epmdPath()
	if err != nil {
		return nil, err
	}
	s.epmd, err = startProcess("epmd", []string{epmdBin, "-port", strconv.Itoa(s.EPMDPort), "-address", "127.0.0.1"},
		s.env, s.Dir, filepath.Join(s.Dir, "epmd.log"), nil)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.EPMDPort)), s.epmd, 10*time.Second); err != nil {
		stop(s.epmd, 0)
		if strings.Contains(s.epmd.Output(), "address already in use") {
			return nil, fmt.Errorf("%w: %v", errPortClash, err)
		}
		return nil, err
	}
	began := time.Now()
	if err := s.Up(); err != nil {
		s.Stop()
		return nil, err
	}
	s.BootTime = time.Since(began)
	return s, nil
}

// writeFiles lays out the broker's directory: config, cookie, certificates.
func (s *Server) writeFiles(try int) error {
	for _, d := range []string{"home", "mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o755); err != nil {
			return err
		}
	}
	// Erlang refuses a cookie file others may read.
	cookie := filepath.Join(s.Dir, "home", ".erlang.cookie")
	os.Remove(cookie)
	if err := os.WriteFile(cookie, []byte(strings.ToUpper(randomHex(10))), 0o400); err != nil {
		return err
	}
	if err := writeCerts(s.Dir); err != nil {
		return fmt.Errorf("rabbitmq: certificates: %w", err)
	}
	s.CAFile = filepath.Join(s.Dir, "ca.pem")
	conf := fmt.Sprintf(`# written by internal/rabbitmq (attempt %d)
default_user = %s
default_pass = %s
listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
# a nearly full CI disk must not raise the alarm that blocks publishers
disk_free_limit.absolute = 1MB
log.console = false
log.file.level = info
`, try, s.User, s.Password, s.TLSPort, s.CAFile, filepath.Join(s.Dir, "server.pem"), filepath.Join(s.Dir, "server.key"))
	files := map[string][]byte{
		"rabbitmq.conf":     []byte(conf),
		"enabled_plugins":   []byte("[].\n"),
		"rabbitmq-env.conf": []byte("# empty: the environment comes from internal/rabbitmq\n"),
		"rpcserver.py":      rpcServerPy,
		"rpcclient.py":      rpcClientPy,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), data, 0o644); err != nil {
			return err
		}
	}
	s.env = append(childEnv(),
		"HOME="+filepath.Join(s.Dir, "home"),
		"RABBITMQ_NODENAME="+s.Node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(s.AMQPPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(s.DistPort),
		"ERL_EPMD_PORT="+strconv.Itoa(s.EPMDPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(s.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(s.Dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(s.Dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(s.Dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(s.Dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(s.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_PID_FILE="+filepath.Join(s.Dir, "rabbitmq.pid"),
		// The script execs Erlang (so the broker is our child and gets
		// Pdeathsig) and Erlang halts when its stdin closes.
		"RABBITMQ_ALLOW_INPUT=true",
		// Two schedulers without busy-waiting: the CI machine has 2 cores
		// shared with everything else. No epmd of Erlang's own: ours runs.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 2:2 +sbwt none +sbwtdcpu none +sbwtdio none -start_epmd false",
	)
	return nil
}

// childEnv is this process' environment without what would point the
// broker, its CLI or Python elsewhere.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "RABBITMQ_"), strings.HasPrefix(k, "ERL_"), strings.HasPrefix(k, "PYTHON"),
			k == "HOME", strings.HasSuffix(strings.ToUpper(k), "_PROXY"):
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Up starts the broker (again) and waits until it accepts an AMQP login.
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("rabbitmq: server stopped")
	}
	if s.broker != nil && !s.broker.Exited() {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	p, err := startProcess("rabbitmq-server", []string{serverBin}, s.env, s.Dir, filepath.Join(s.Dir, "broker.log"), r)
	r.Close()
	if err != nil {
		w.Close()
		return err
	}
	s.broker, s.stdin = p, w
	deadline := time.Now().Add(bootTimeout)
	var lastErr error
	for {
		if p.Exited() {
			err := p.ExitError()
			if strings.Contains(err.Error(), "eaddrinuse") {
				err = fmt.Errorf("%w: %v", errPortClash, err)
			}
			return err
		}
		c, err := amqp.DialConfig(s.URLFor("amqp"), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			c.Close()
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("rabbitmq: broker not accepting AMQP logins after %s: %v; last lines of %s:\n%s",
				bootTimeout, lastErr, p.Log, proc.LastLines(p.Output(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Down stops the broker gracefully (SIGTERM), keeping its data.
func (s *Server) Down() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downLocked()
}

func (s *Server) downLocked() error {
	if s.broker == nil {
		return nil
	}
	err := stop(s.broker, stopGrace)
	s.stdin.Close()
	s.broker, s.stdin = nil, nil
	return err
}

// Restart stops the broker and starts it again on the same ports and data.
func (s *Server) Restart() error {
	if err := s.Down(); err != nil {
		return err
	}
	return s.Up()
}

// Stop stops the RPC servers, the broker and epmd. It is idempotent.
func (s *Server) Stop() error {
	s.mu.Lock()
	servers := make([]*RPCServer, 0, len(s.rpc))
	for p := range s.rpc {
		servers = append(servers, p)
	}
	s.stopped = true
	s.mu.Unlock()
	var errs []error
	for _, p := range servers {
		errs = append(errs, p.Kill())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	errs = append(errs, s.downLocked())
	if s.epmd != nil {
		errs = append(errs, stop(s.epmd, time.Second))
		s.epmd = nil
	}
	return errors.Join(errs...)
}

// Addr is the AMQP listener's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.AMQPPort)) }

// URL is an oslo.messaging transport URL for the broker, with the user's
// escaped credentials and the default vhost.
func (s *Server) URL() string { return s.URLFor("rabbit") }

// TLSURL is the transport URL of the TLS listener; it needs ?ssl=1 or
// [oslo_messaging_rabbit] ssl = true, and CAFile.
func (s *Server) TLSURL() string {
	return fmt.Sprintf("rabbit://%s@127.0.0.1:%d/", url.UserPassword(s.User, s.Password), s.TLSPort)
}

// URLFor is URL with another scheme ("amqp" for amqp091-go).
func (s *Server) URLFor(scheme string) string {
	return fmt.Sprintf("%s://%s@%s/", scheme, url.UserPassword(s.User, s.Password), s.Addr())
}

// Ctl runs rabbitmqctl against the broker and returns its standard output.
func (s *Server) Ctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBin, append([]string{"-n", s.Node, "-q"}, args...)...)
	cmd.Env = s.env
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Connection is one client connection as rabbitmqctl lists it.
type Connection struct {
	Name         string // "127.0.0.1:PORT -> 127.0.0.1:PORT"
	User         string
	ProvidedName string // the client's connection_name property
}

// ListConnections lists the broker's client connections.
func (s *Server) ListConnections(ctx context.Context) ([]Connection, error) {
	rows, err := s.list(ctx, "list_connections", "name", "user", "client_properties")
	if err != nil {
		return nil, err
	}
	out := make([]Connection, 0, len(rows))
	for _, r := range rows {
		c := Connection{Name: r[0], User: r[1]}
		// client_properties is an Erlang term: [{"connection_name","NAME"},...]
		if m := connectionNameRE.FindStringSubmatch(r[2]); m != nil {
			c.ProvidedName = m[1]
		}
		out = append(out, c)
	}
	return out, nil
}

var connectionNameRE = regexp.MustCompile(`\{"connection_name",(?:longstr,)?"([^"]*)"\}`)

// Queue is one queue as rabbitmqctl lists it.
type Queue struct {
	Name      string
	Consumers int
	Messages  int
}

// ListQueues lists the default vhost's queues.
func (s *Server) ListQueues(ctx context.Context) ([]Queue, error) {
	rows, err := s.list(ctx, "list_queues", "name", "consumers", "messages")
	if err != nil {
		return nil, err
	}
	out := make([]Queue, 0, len(rows))
	for _, r := range rows {
		c, _ := strconv.Atoi(r[1])
		m, _ := strconv.Atoi(r[2])
		out = append(out, Queue{Name: r[0], Consumers: c, Messages: m})
	}
	return out, nil
}

// ListExchanges lists the names of the default vhost's exchanges.
func (s *Server) ListExchanges(ctx context.Context) ([]string, error) {
	rows, err := s.list(ctx, "list_exchanges", "name")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, r[0])
	}
	return out, nil
}

// list runs a rabbitmqctl list_* command and splits its tab-separated rows,
// each padded to the number of items asked for.
func (s *Server) list(ctx context.Context, cmd string, items ...string) ([][]string, error) {
	out, err := s.Ctl(ctx, append([]string{cmd, "--no-table-headers"}, items...)...)
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "\t")
		for len(f) < len(items) {
			f = append(f, "")
		}
		rows = append(rows, f)
	}
	return rows, nil
}

// waitTCP waits until addr accepts connections, or p exits.
func waitTCP(addr string, p *proc.Process, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return p.ExitError()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not listening after %s", p.Name, addr, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePorts returns n distinct free loopback ports, held at the same time so
// that they differ (another process may still take one before it is used).
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// AcceptedConnections counts the AMQP connections the broker has accepted
// since it was first started, from its log: all of them, or with a prefix
// those whose client-provided name (connection_name property; amqp091-go's
// SetClientConnectionName, oslo.messaging's "PROGRAM:PID:UUID") starts with
// it. The log is written asynchronously: poll until the count is stable.
func (s *Server) AcceptedConnections(namePrefix string) (int, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "log", s.Node+".log"))
	if err != nil {
		return 0, err
	}
	if namePrefix == "" {
		return strings.Count(string(b), "accepting AMQP connection"), nil
	}
	return strings.Count(string(b), "has a client-provided name: "+namePrefix), nil
}
