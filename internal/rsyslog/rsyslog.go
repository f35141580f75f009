// Package rsyslog runs the real rsyslog for tests: Debian's rsyslogd, which
// hack/install-tools.sh (rsyslog) installs, unprivileged and in the
// foreground, with imtcp listening on a loopback port and every message it
// receives written by omfile as one JSON line, which Messages reads back.
//
// Everything rsyslogd touches is in the test's temporary directory: its
// configuration (-f), its PID file (-i), its work directory, the output, its
// own messages and its stderr. It needs no privileges, reads no system
// configuration and does no DNS look-ups.
//
// What rsyslogd (8.2302.0, Debian bookworm) does with what it receives, as
// the tests here and experiments against it showed:
//
//   - imtcp supports octet-counted framing ("LEN SP MSG", RFC 6587 3.4.1)
//     by default (SupportOctetCountedFraming is on), alongside non-transparent
//     framing (each message ends at LF). It picks the framing anew at the
//     start of each frame: a digit means octet counting. So a multi-line
//     message arrives whole only when it is octet-counted; sent LF-terminated,
//     its second line becomes a message of its own (a non-RFC 5424 one).
//   - By default rsyslog rewrites control characters on receive (LF as
//     "#012", TAB as "#011") and drops a trailing LF. The configuration
//     written here turns all three off (parser.escapeControlCharactersOnReceive,
//     parser.escapeControlCharacterTab, parser.dropTrailingLFOnReception), so
//     MSG keeps every byte, trailing LF, CR, TAB, a BOM and invalid UTF-8
//     included. The one exception is NUL: a message containing one has it
//     rewritten as "#000" and its other control characters removed, and a
//     trailing NUL is dropped; rsyslog does that whatever the settings.
//   - A message longer than maxMessageSize (default 8096 bytes, see
//     Options.MaxMessageSize) is truncated, and the rest of its octet-counted
//     frame becomes a message of its own (imtcp's discardTruncatedMsg is
//     off). A count above imtcp's maxFrameSize (200000) is a framing error:
//     rsyslog then reads the frame as LF-terminated data.
//   - A nil timestamp ("-") is replaced with the time of reception, and
//     nil hostname, app-name, procid, msgid and structured data are reported
//     as "-". A message that is not RFC 5424 is parsed as a legacy (RFC 3164)
//     one: its Version is 0 and its fields are what that parser made of it.
//   - omfile's JSON escaping (property format "jsonf") writes control
//     characters as \b, \f, \n, \r, \t or \u00XX, quotes, backslashes and
//     slashes with a backslash, and every other byte as it is, DEL and bytes
//     that are not valid UTF-8 included. Messages undoes exactly that, so
//     MSG comes back byte for byte (encoding/json would replace invalid
//     UTF-8 with U+FFFD).
//   - rsyslogd does not exit when it cannot bind its port: it logs "Could not
//     create tcp listener" and runs on. Start therefore waits until the
//     listening socket is rsyslogd's own and accepts a connection (with TLS:
//     completes a handshake).
//   - SIGKILL loses what rsyslogd accepted but had not yet written: its main
//     queue is in memory. omfile flushes at the end of each batch, so what a
//     client sent a moment before is normally already in Output.
//
// With Options.TLS imtcp serves TLS through rsyslog's gtls (GnuTLS) netstream
// driver, or its ossl (OpenSSL) one if only that is installed; neither comes
// with the rsyslog package (they are rsyslog-gnutls and rsyslog-openssl), and
// without them Start skips the test.
package rsyslog

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/kolla-agent/kolla-agent/internal/proc"
)

const (
	// Rsyslogd is where Debian's rsyslog package installs the daemon.
	Rsyslogd = "/usr/sbin/rsyslogd"

	// startTimeout bounds the wait for the listener (rsyslogd starts in
	// well under a second).
	startTimeout = 15 * time.Second
	// stopGrace is how long a stop waits after SIGTERM, in which rsyslogd
	// writes out what it has queued.
	stopGrace = 3 * time.Second
	// restartWindow is how long Restart retries while the port is taken.
	restartWindow = 5 * time.Second
	// startTries is how many free ports Start tries when one is taken
	// between choosing it and rsyslogd binding it.
	startTries = 3
	// pollInterval paces the waits.
	pollInterval = 10 * time.Millisecond
)

// errPortClash says the port rsyslogd was to listen on is another's.
var errPortClash = errors.New("port taken")

// Options configure Start.
type Options struct {
	// TLS serves TLS (imtcp with a netstream driver, mode 1, anonymous
	// clients) with a self-signed certificate for 127.0.0.1 and localhost,
	// which Server.CAFile holds. Start skips the test when neither of
	// rsyslog's TLS netstream drivers is installed.
	TLS bool
	// MaxMessageSize is rsyslog's maxMessageSize in bytes; 0 leaves
	// rsyslog's default, 8096. Longer messages are truncated (see the
	// package documentation).
	MaxMessageSize int
}

// Server is a running rsyslogd. Addr and the paths are set by Start and
// stay the same across Kill and Restart. Its methods may be called from any
// goroutine; Start and Restart take a testing.TB and so belong in the test's
// goroutine.
type Server struct {
	Addr     string // 127.0.0.1:PORT, where imtcp listens
	Output   string // the messages received, one JSON line each
	Dir      string // rsyslogd's files
	Config   string // the configuration file
	Log      string // rsyslogd's stdout and stderr (its errors go there)
	Internal string // rsyslogd's own messages: start, stop, errors
	CAFile   string // with TLS: the PEM certificate to trust (self-signed)
	Driver   string // with TLS: the netstream driver, "gtls" or "ossl"

	opts    Options
	pidFile string
	keyFile string

	mu      sync.Mutex
	port    int
	p       *proc.Process
	clashes int // Restart's starts that found the port taken

	// Messages parses Output incrementally: msgs holds the messages of its
	// first read bytes (whole lines only).
	readMu sync.Mutex
	msgs   []Message
	read   int64
}

// Message is one message as rsyslog parsed it (RFC 5424 section 6).
type Message struct {
	PRI      int // the PRI value: Facility*8 + Severity
	Facility int
	Severity int
	// Version is 1 for an RFC 5424 message, 0 for one rsyslog parsed as a
	// legacy (RFC 3164) message.
	Version int
	// Timestamp is the message's TIMESTAMP, with its fraction and offset;
	// the time of reception when the message had none ("-").
	Timestamp      time.Time
	Hostname       string
	AppName        string
	ProcID         string
	MsgID          string
	StructuredData string // as sent, e.g. [id@32473 a="b"]; "-" for none
	// MSG is everything after the structured data and the space that ends
	// it, byte for byte, newlines included (see the package documentation
	// for the one exception, NUL).
	MSG string
	// Raw is the whole message as rsyslog received it, without its framing.
	Raw string
}

// Start starts rsyslogd on a free loopback port and stops it when the test
// ends. It fails the test if rsyslogd is missing (run hack/install-tools.sh
// rsyslog), rejects its configuration or does not come up, and skips it when
// opts.TLS asks for a TLS driver that is not installed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	driver := ""
	if opts.TLS {
		if driver = tlsDriver(); driver == "" {
			t.Skip("rsyslog: TLS needs rsyslog's gtls or ossl netstream driver (lmnsd_gtls.so, lmnsd_ossl.so), and neither is installed (Debian packages rsyslog-gnutls, rsyslog-openssl)")
		}
	}
	s, err := newServer(t.TempDir(), opts, driver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.stop(stopGrace); err != nil {
			t.Error(err)
		}
	})
	for try := 1; ; try++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		err = s.start(bin, port)
		if err == nil {
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			return s
		}
		if !errors.Is(err, errPortClash) || try == startTries {
			t.Fatal(err)
		}
	}
}

// binary returns the rsyslogd to run: Rsyslogd, or one in PATH.
func binary() (string, error) {
	if _, err := os.Stat(Rsyslogd); err == nil {
		return Rsyslogd, nil
	}
	if p, err := exec.LookPath("rsyslogd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("rsyslog: %s not found; run hack/install-tools.sh rsyslog", Rsyslogd)
}

// tlsDriver returns "gtls" or "ossl", whichever of rsyslog's TLS netstream
// drivers is installed (gtls first), or "".
func tlsDriver() string {
	for _, d := range []string{"gtls", "ossl"} {
		for _, dir := range []string{"/usr/lib/*/rsyslog", "/usr/lib/rsyslog", "/usr/lib64/rsyslog"} {
			if m, _ := filepath.Glob(filepath.Join(dir, "lmnsd_"+d+".so")); len(m) > 0 {
				return d
			}
		}
	}
	return ""
}

func newServer(dir string, opts Options, driver string) (*Server, error) {
	s := &Server{
		Output:   filepath.Join(dir, "messages.jsonl"),
		Dir:      dir,
		Config:   filepath.Join(dir, "rsyslog.conf"),
		Log:      filepath.Join(dir, "rsyslogd.log"),
		Internal: filepath.Join(dir, "internal.log"),
		Driver:   driver,
		opts:     opts,
		pidFile:  filepath.Join(dir, "rsyslogd.pid"),
	}
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		return nil, fmt.Errorf("rsyslog: %w", err)
	}
	// Created up front, so Messages finds it before the first message;
	// omfile appends to it, across restarts too.
	if err := os.WriteFile(s.Output, nil, 0o644); err != nil {
		return nil, fmt.Errorf("rsyslog: %w", err)
	}
	if opts.TLS {
		s.CAFile = filepath.Join(dir, "cert.pem")
		s.keyFile = filepath.Join(dir, "key.pem")
		if err := writeCert(s.CAFile, s.keyFile); err != nil {
			return nil, fmt.Errorf("rsyslog: certificate: %w", err)
		}
	}
	return s, nil
}

// template writes each message as one JSON object on one line:
// option.jsonf makes the list a JSON object, each property format="jsonf"
// one escaped "name":value member (rsyslog 8.2302 syntax).
const template = `template(name="message_json" type="list" option.jsonf="on") {
	property(outname="pri" name="pri" format="jsonf" datatype="number")
	property(outname="facility" name="syslogfacility" format="jsonf" datatype="number")
	property(outname="severity" name="syslogseverity" format="jsonf" datatype="number")
	property(outname="version" name="protocol-version" format="jsonf" datatype="number")
	property(outname="timestamp" name="timereported" dateFormat="rfc3339" format="jsonf")
	property(outname="hostname" name="hostname" format="jsonf")
	property(outname="app_name" name="app-name" format="jsonf")
	property(outname="procid" name="procid" format="jsonf")
	property(outname="msgid" name="msgid" format="jsonf")
	property(outname="structured_data" name="structured-data" format="jsonf")
	property(outname="msg" name="msg" format="jsonf")
	property(outname="raw" name="rawmsg" format="jsonf")
}
`

// config is rsyslogd's configuration for port.
func (s *Server) config(port int) string {
	var b strings.Builder
	b.WriteString("# rsyslogd for one test: imtcp on loopback, each message one JSON line.\n")
	b.WriteString("global(\n")
	fmt.Fprintf(&b, "\tworkDirectory=%s\n", quote(filepath.Join(s.Dir, "work")))
	b.WriteString("\tprocessInternalMessages=\"on\"\n")
	b.WriteString("\tnet.enableDNS=\"off\"\n")
	b.WriteString("\tlocalHostname=\"rsyslog-test\"\n")
	b.WriteString("\tparser.escapeControlCharactersOnReceive=\"off\"\n")
	b.WriteString("\tparser.escapeControlCharacterTab=\"off\"\n")
	b.WriteString("\tparser.dropTrailingLFOnReception=\"off\"\n")
	if s.opts.MaxMessageSize > 0 {
		fmt.Fprintf(&b, "\tmaxMessageSize=\"%d\"\n", s.opts.MaxMessageSize)
	}
	b.WriteString(")\n")
	b.WriteString("module(load=\"imtcp\")\n")
	b.WriteString(template)
	b.WriteString("ruleset(name=\"tcp\") {\n")
	fmt.Fprintf(&b, "\taction(type=\"omfile\" file=%s template=\"message_json\" flushOnTXEnd=\"on\" asyncWriting=\"off\")\n", quote(s.Output))
	b.WriteString("}\n")
	fmt.Fprintf(&b, "input(type=\"imtcp\" port=\"%d\" address=\"127.0.0.1\" ruleset=\"tcp\"", port)
	if s.opts.TLS {
		fmt.Fprintf(&b, "\n\tstreamDriver.name=%s streamDriver.mode=\"1\" streamDriver.authMode=\"anon\"", quote(s.Driver))
		fmt.Fprintf(&b, "\n\tstreamDriver.CAFile=%s streamDriver.CertFile=%s streamDriver.KeyFile=%s", quote(s.CAFile), quote(s.CAFile), quote(s.keyFile))
	}
	b.WriteString(")\n")
	b.WriteString("# rsyslogd's own messages go to the default ruleset.\n")
	fmt.Fprintf(&b, "action(type=\"omfile\" file=%s)\n", quote(s.Internal))
	return b.String()
}

// quote makes v an rsyslog string constant.
func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// start writes the configuration for port, checks it with rsyslogd -N1 and
// runs rsyslogd until its listener accepts connections. An error wrapping
// errPortClash says another process has the port.
func (s *Server) start(bin string, port int) error {
	if err := os.WriteFile(s.Config, []byte(s.config(port)), 0o644); err != nil {
		return fmt.Errorf("rsyslog: %w", err)
	}
	if err := validate(bin, s.Config); err != nil {
		return err
	}
	// A PID file left by a killed rsyslogd would stop the new one if its
	// PID has been reused.
	if err := os.Remove(s.pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rsyslog: %w", err)
	}
	p, err := proc.Start("rsyslogd", []string{bin, "-n", "-f", s.Config, "-i", s.pidFile}, s.Log, proc.Attr{Dir: s.Dir, Env: env()})
	if err != nil {
		return fmt.Errorf("rsyslog: %w", err)
	}
	if err := s.waitListening(p, port); err != nil {
		return errors.Join(err, p.Stop(0))
	}
	s.mu.Lock()
	s.p, s.port = p, port
	s.mu.Unlock()
	return nil
}

// validate runs rsyslog's configuration check (-N1), which names an unknown
// parameter or a syntax error that rsyslogd itself would only log before
// running on without the object concerned.
func validate(bin, conf string) error {
	out, err := exec.Command(bin, "-N1", "-f", conf).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rsyslog: %s -N1 -f %s rejects the configuration: %v\n%s", bin, conf, err, out)
	}
	return nil
}

// env is this process' environment without RSYSLOG_ variables, which would
// change where rsyslogd loads modules from or turn on its debug output.
func env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RSYSLOG_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitListening waits until p listens on port and a connection to it
// succeeds (with TLS: a handshake).
func (s *Server) waitListening(p *proc.Process, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(startTimeout)
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("rsyslog: %w", p.ExitError())
		}
		out := p.Output()
		if strings.Contains(out, "Address already in use") {
			return fmt.Errorf("rsyslog: %w: %s: %s", errPortClash, addr, proc.LastLines(out, 5))
		}
		if strings.Contains(out, "Could not create tcp listener") {
			return fmt.Errorf("rsyslog: rsyslogd could not listen on %s; last lines of %s:\n%s", addr, s.Log, proc.LastLines(out, 15))
		}
		owned, err := ownsListener(p.Pid, port)
		switch {
		case errors.Is(err, errPortClash):
			return fmt.Errorf("rsyslog: %w", err)
		case err != nil:
			last = err
		case owned:
			if last = s.probe(addr); last == nil {
				return nil
			}
		default:
			last = errors.New("not listening yet")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rsyslog: rsyslogd (pid %d) not accepting connections on %s after %v: %v; last lines of %s:\n%s", p.Pid, addr, startTimeout, last, s.Log, proc.LastLines(out, 15))
		}
		time.Sleep(pollInterval)
	}
}

// probe connects to addr and, with TLS, completes a handshake, then closes
// the connection cleanly. rsyslog gets no message from it.
func (s *Server) probe(addr string) error {
	d := net.Dialer{Timeout: 2 * time.Second}
	if !s.opts.TLS {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	cfg, err := s.ClientTLSConfig()
	if err != nil {
		return err
	}
	c, err := (&tls.Dialer{NetDialer: &d, Config: cfg}).Dial("tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// ClientTLSConfig returns a client configuration that trusts the server's
// certificate, for a server started with TLS.
func (s *Server) ClientTLSConfig() (*tls.Config, error) {
	if s.CAFile == "" {
		return nil, errors.New("rsyslog: the server does not serve TLS")
	}
	pemBytes, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, fmt.Errorf("rsyslog: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("rsyslog: no certificate in %s", s.CAFile)
	}
	// No ServerName: the client under test must set it (from the address).
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// freePort returns a loopback TCP port that is free now; rsyslogd binds it a
// moment later, and Start tries another if it lost the race.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("rsyslog: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ownsListener reports whether a listening TCP socket on port belongs to
// pid: false when there is none yet, an error wrapping errPortClash when one
// belongs to another process.
func ownsListener(pid, port int) (bool, error) {
	all, foreign, err := proc.PortSockets(pid, port, false)
	switch {
	case err != nil || len(all) == 0:
		return false, err
	case len(foreign) > 0:
		return false, fmt.Errorf("%w: another process listens on port %d (socket inode %s)", errPortClash, port, foreign[0])
	}
	return true, nil
}

// Kill SIGKILLs rsyslogd and waits until it is gone, for fault tests: the
// kernel closes its connections, what it had queued but not written is
// lost, and connecting fails until Restart. Messages already written stay
// in Output.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil
	}
	return s.p.Stop(0)
}

// Restart starts rsyslogd again on the same port, appending to the same
// Output, after Kill; if it still runs, it is stopped first with SIGTERM, so
// it writes out what it has queued. It fails the test if rsyslogd does not
// come up.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.stop(stopGrace); err != nil {
		t.Fatal(err)
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	port := s.port
	s.mu.Unlock()
	deadline := time.Now().Add(restartWindow)
	for {
		err := s.start(bin, port)
		if err == nil {
			return
		}
		// The port can stay taken for a moment (by another process that
		// grabbed it while rsyslogd was down).
		if !errors.Is(err, errPortClash) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.clashes++
		s.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends rsyslogd: SIGTERM, then SIGKILL after grace (at once for 0).
func (s *Server) stop(grace time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil
	}
	err := s.p.Stop(grace)
	s.p = nil
	return err
}

// line is one line of Output, as the template writes it. The strings are
// kept raw: unquote decodes them byte for byte.
type line struct {
	PRI            int             `json:"pri"`
	Facility       int             `json:"facility"`
	Severity       int             `json:"severity"`
	Version        int             `json:"version"`
	Timestamp      json.RawMessage `json:"timestamp"`
	Hostname       json.RawMessage `json:"hostname"`
	AppName        json.RawMessage `json:"app_name"`
	ProcID         json.RawMessage `json:"procid"`
	MsgID          json.RawMessage `json:"msgid"`
	StructuredData json.RawMessage `json:"structured_data"`
	MSG            json.RawMessage `json:"msg"`
	Raw            json.RawMessage `json:"raw"`
}

// Messages returns every message written to Output so far, in the order
// written, across restarts. Each call parses only what was added since the
// last one.
func (s *Server) Messages() ([]Message, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if err := s.load(); err != nil {
		return nil, err
	}
	return slices.Clone(s.msgs), nil
}

// load parses the lines added to Output since the last call into s.msgs.
// The caller holds readMu.
func (s *Server) load() error {
	var err error
	s.read, err = proc.NewLines(s.Output, s.read, func(b []byte) error {
		m, err := parseLine(b)
		if err != nil {
			return fmt.Errorf("%s:%d: %w: %q", s.Output, len(s.msgs)+1, err, b)
		}
		s.msgs = append(s.msgs, m)
		return nil
	})
	if err != nil {
		return fmt.Errorf("rsyslog: %w", err)
	}
	return nil
}

func parseLine(b []byte) (Message, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return Message{}, err
	}
	m := Message{PRI: l.PRI, Facility: l.Facility, Severity: l.Severity, Version: l.Version}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *string
	}{
		{"hostname", l.Hostname, &m.Hostname},
		{"app_name", l.AppName, &m.AppName},
		{"procid", l.ProcID, &m.ProcID},
		{"msgid", l.MsgID, &m.MsgID},
		{"structured_data", l.StructuredData, &m.StructuredData},
		{"msg", l.MSG, &m.MSG},
		{"raw", l.Raw, &m.Raw},
	} {
		v, err := unquote(f.raw)
		if err != nil {
			return Message{}, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = v
	}
	ts, err := unquote(l.Timestamp)
	if err != nil {
		return Message{}, fmt.Errorf("timestamp: %w", err)
	}
	if m.Timestamp, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		return Message{}, fmt.Errorf("timestamp: %w", err)
	}
	return m, nil
}

// unquote decodes a JSON string as rsyslog writes it, keeping every byte
// that is not part of an escape as it is (invalid UTF-8 included).
func unquote(q []byte) (string, error) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return "", fmt.Errorf("not a JSON string: %q", q)
	}
	q = q[1 : len(q)-1]
	out := make([]byte, 0, len(q))
	for i := 0; i < len(q); i++ {
		c := q[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 >= len(q) {
			return "", errors.New("string ends in a backslash")
		}
		i++
		switch q[i] {
		case '"', '\\', '/':
			out = append(out, q[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n, err := hex4(q[i+1:])
			if err != nil {
				return "", err
			}
			i += n
			if utf16.IsSurrogate(r) {
				// A pair: \uD8xx\uDCxx.
				if len(q) > i+2 && q[i+1] == '\\' && q[i+2] == 'u' {
					if r2, n2, err := hex4(q[i+3:]); err == nil {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							r = dec
							i += 2 + n2
						}
					}
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", fmt.Errorf("unknown escape \\%c", q[i])
		}
	}
	return string(out), nil
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, int, error) {
	if len(b) < 4 {
		return 0, 0, errors.New("short \\u escape")
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return 0, 0, fmt.Errorf("bad \\u escape %q", b[:4])
	}
	return rune(v), 4, nil
}

// WaitMessages polls Messages until there are at least n and returns them
// all; it fails the test if that takes longer than within, or if rsyslogd
// died without Kill.
func (s *Server) WaitMessages(t testing.TB, n int, within time.Duration) []Message {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msgs, err := s.Messages()
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) >= n {
			return msgs
		}
		s.mu.Lock()
		p := s.p
		s.mu.Unlock()
		if p != nil && p.Exited() {
			t.Fatalf("rsyslog: %d of %d messages, and rsyslogd is gone: %v", len(msgs), n, p.ExitError())
		}
		if time.Now().After(deadline) {
			t.Fatalf("rsyslog: %d of %d messages after %v; last lines of %s:\n%s\nlast lines of %s:\n%s",
				len(msgs), n, within, s.Log, lastLines(s.Log), s.Internal, lastLines(s.Internal))
		}
		time.Sleep(pollInterval)
	}
}

func lastLines(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return proc.LastLines(string(b), 15)
}

// writeCert writes a self-signed ECDSA P-256 certificate for 127.0.0.1 and
// localhost, its own CA, and its PKCS #8 key (which GnuTLS and OpenSSL read).
func writeCert(certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "internal/rsyslog test server"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}
