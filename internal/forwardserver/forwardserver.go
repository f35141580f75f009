// Package forwardserver runs a real Fluent forward protocol server for tests:
// FluentServer of the npm package @fluent-org/logger, which
// hack/install-tools.sh (fluent) installs into the test cache, driven by
// /usr/bin/node from server.js. It listens on loopback, acks every message
// that carries a chunk option, optionally requires the shared-key handshake
// and serves TLS, and appends each entry it receives to a JSON-lines file,
// which Records reads back.
//
// What FluentServer (1.0.10, build/src/server.js and protocol.js) does:
//
//   - It accepts the four transport modes: Message [tag, time, record,
//     option?], Forward [tag, [[time, record], ...], option?], PackedForward
//     [tag, bin, option?] and CompressedPackedForward (option compressed:
//     "gzip"). A time is a number (seconds) or an EventTime (ext type 0: uint32
//     seconds, uint32 nanoseconds, big-endian). The option's chunk must be a
//     str (a bin chunk fails the type check), size a number.
//   - For a message whose option has a chunk it writes {"ack": chunk} (a
//     fixmap with the str chunk) before it hands the entries, one by one, to
//     onEntry(tag, time, record), which emits "entry" with the same three
//     arguments; the chunk is not passed on. server.js therefore records the
//     entries when the message is parsed, so every acked entry is in the
//     file before its ack is sent.
//   - Anything it does not accept (a decode error, an unexpected message)
//     ends the connection without a reply, as does a failed PING after its
//     PONG; server.js logs the reason to Server.Log.
//   - With a shared key it sends, on connect, ["HELO", {"nonce": 16 random
//     bytes as bin, "auth": "" (str; a bin salt only with user
//     authentication, which this package does not enable), "keepalive":
//     true}]. It expects ["PING", client_hostname, salt (str or bin),
//     hex(sha512(salt + client_hostname + nonce + shared_key)), username,
//     password_digest], the last two str ("" here); client_hostname must
//     differ from its own hostname. It answers ["PONG", true, "",
//     server_hostname, hex(sha512(salt + server_hostname + nonce +
//     shared_key))], or ["PONG", false, reason, server_hostname, ""] and
//     closes the connection. The nonce enters the digests as its raw bytes.
//
// A str in a record is decoded as UTF-8 with invalid bytes replaced by
// U+FFFD (see nodeEnv), so bytes that must survive go as bin. A str whose
// first byte is 0x92, 0xdc, 0xdd or 0x1f is taken for packed entries and
// decoded as bin (a []byte in Fields): the package's workaround for fluentd
// sending PackedForward entries as str.
package forwardserver

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

const (
	// Version is the @fluent-org/logger version hack/install-tools.sh installs.
	Version = "1.0.10"
	// Node runs the server: Debian's (or NodeSource's) nodejs.
	Node = "/usr/bin/node"
	// DefaultServerHostname is the hostname the server sends in PONG. A
	// client's own hostname in PING must differ from it.
	DefaultServerHostname = "forwardserver"

	// startTimeout bounds the wait for "listening PORT" (Node starts in
	// about 0.1 s).
	startTimeout = 15 * time.Second
	// stopGrace is how long the cleanup waits after SIGTERM.
	stopGrace = 2 * time.Second
	// restartWindow is how long Restart retries while the old port is
	// still taken.
	restartWindow = 5 * time.Second
)

//go:embed server.js
var script []byte

var listening = regexp.MustCompile(`(?m)^listening (\d+)$`)

// ModuleDir is where hack/install-tools.sh installs @fluent-org/logger:
// <cache>/npm/fluent-org-logger-<Version>/node_modules/@fluent-org/logger,
// the cache being testenv.CacheDir.
func ModuleDir() string {
	return filepath.Join(testenv.CacheDir(), "npm", "fluent-org-logger-"+Version, "node_modules", "@fluent-org", "logger")
}

// CheckInstalled reports a missing Node or package in one error that says
// how to install them.
func CheckInstalled() error {
	var missing []string
	if _, err := os.Stat(Node); err != nil {
		missing = append(missing, Node+" (Debian package nodejs)")
	}
	if _, err := os.Stat(filepath.Join(ModuleDir(), "build", "src", "server.js")); err != nil {
		missing = append(missing, "@fluent-org/logger "+Version+" in "+ModuleDir())
	}
	if len(missing) > 0 {
		return fmt.Errorf("forwardserver: missing %s; run hack/install-tools.sh fluent", strings.Join(missing, ", "))
	}
	return nil
}

// Options configure Start.
type Options struct {
	// SharedKey, when set, makes the server require the shared-key
	// handshake (HELO, PING, PONG) before it accepts events.
	SharedKey string
	// ServerHostname is the hostname the server sends in PONG; empty means
	// DefaultServerHostname. Only used with SharedKey.
	ServerHostname string
	// TLS serves TLS with a self-signed certificate for 127.0.0.1 (and
	// localhost), which Server.CAFile holds.
	TLS bool
}

// Server is a running forward server. Its methods may be called from any
// goroutine; Restart and Start take a testing.TB and so belong in the test's
// goroutine.
type Server struct {
	Dir            string // the server's files
	Output         string // the JSON-lines file of received entries
	Log            string // Node's stdout and stderr
	CAFile         string // with TLS: the PEM certificate to trust (self-signed)
	ServerHostname string // with a shared key: the hostname in PONG

	scriptPath string
	opts       Options
	certFile   string
	keyFile    string

	mu   sync.Mutex
	port int
	p    *proc.Process

	// Records parses Output incrementally: recs holds the entries of its
	// first read bytes (whole lines only).
	readMu sync.Mutex
	recs   []Record
	read   int64
}

// Record is one entry the server received.
type Record struct {
	Tag string
	// Time is the entry's time; EventTime says it came as an EventTime (ext
	// type 0, nanoseconds) rather than an integer or float of seconds.
	Time      time.Time
	EventTime bool
	// Fields is the record as JSON would decode it (numbers are float64);
	// a msgpack bin value is a []byte.
	Fields map[string]any
	// Chunk is the chunk option of the message the entry came in, "" when
	// it had none (and so was not acked).
	Chunk string
	// Mode is the message's transport mode: "Message", "Forward",
	// "PackedForward" or "CompressedPackedForward".
	Mode string
}

// Start starts a server on a free loopback port and stops it when the test
// ends. It fails the test if Node or the package is missing (run
// hack/install-tools.sh fluent) or the server does not come up.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.start(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.stop(stopGrace); err != nil {
			t.Error(err)
		}
	})
	return s
}

func newServer(dir string, opts Options) (*Server, error) {
	s := &Server{
		Dir:        dir,
		Output:     filepath.Join(dir, "records.jsonl"),
		Log:        filepath.Join(dir, "server.log"),
		scriptPath: filepath.Join(dir, "server.js"),
		opts:       opts,
	}
	if opts.SharedKey != "" {
		s.ServerHostname = opts.ServerHostname
		if s.ServerHostname == "" {
			s.ServerHostname = DefaultServerHostname
		}
	}
	if err := os.WriteFile(s.scriptPath, script, 0o644); err != nil {
		return nil, fmt.Errorf("forwardserver: %w", err)
	}
	// Created up front, so Records finds it before the first entry.
	if err := os.WriteFile(s.Output, nil, 0o644); err != nil {
		return nil, fmt.Errorf("forwardserver: %w", err)
	}
	if opts.TLS {
		s.certFile = filepath.Join(dir, "cert.pem")
		s.keyFile = filepath.Join(dir, "key.pem")
		s.CAFile = s.certFile
		if err := writeCert(s.certFile, s.keyFile); err != nil {
			return nil, fmt.Errorf("forwardserver: certificate: %w", err)
		}
	}
	return s, nil
}

// Addr is the server's address, 127.0.0.1:PORT. It stays the same across
// Kill and Restart.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Kill SIGKILLs the server and waits until it is gone, for fault tests: the
// kernel closes its connections (a client sees EOF or a reset), messages it
// has not parsed yet get no ack, and connecting fails until Restart. Entries
// already written stay in Output.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil
	}
	return s.p.Stop(0)
}

// Restart starts the server again on the same port, appending to the same
// Output, after Kill (or stops it first if it still runs). It fails the
// test if the server does not come up.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.stop(0); err != nil {
		t.Fatal(err)
	}
	if err := dropTornLine(s.Output); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	port := s.port
	s.mu.Unlock()
	deadline := time.Now().Add(restartWindow)
	for {
		err := s.start(port)
		if err == nil {
			return
		}
		// The port can stay taken for a moment (a connection still being
		// torn down, or another process that grabbed it).
		if !strings.Contains(err.Error(), "EADDRINUSE") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dropTornLine truncates path after its last newline: a server killed in
// the middle of writing a line leaves part of it, which the next server's
// lines would otherwise follow on the same line. Its chunk was not acked
// (the ack is written after the line), so the client sends it again.
func dropTornLine(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if i := bytes.LastIndexByte(b, '\n'); i+1 < len(b) {
		return os.Truncate(path, int64(i+1))
	}
	return nil
}

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

// start runs Node on port (0: any) and waits for "listening PORT".
func (s *Server) start(port int) error {
	cfg := map[string]any{
		"module": ModuleDir(),
		"port":   port,
		"output": s.Output,
	}
	if s.opts.SharedKey != "" {
		cfg["sharedKey"] = s.opts.SharedKey
		cfg["serverHostname"] = s.ServerHostname
	}
	if s.opts.TLS {
		cfg["tlsCert"] = s.certFile
		cfg["tlsKey"] = s.keyFile
	}
	arg, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	p, err := proc.Start("forwardserver", []string{Node, s.scriptPath, string(arg)}, s.Log, proc.Attr{Dir: s.Dir, Env: nodeEnv()})
	if err != nil {
		return fmt.Errorf("forwardserver: %w", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		if m := listening.FindStringSubmatch(p.Output()); m != nil {
			got, _ := strconv.Atoi(m[1])
			s.mu.Lock()
			s.p, s.port = p, got
			s.mu.Unlock()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("forwardserver: %w", p.ExitError())
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("forwardserver: not listening after %v; last lines of %s:\n%s", startTimeout, s.Log, proc.LastLines(p.Output(), 15))
			return errors.Join(err, p.Stop(0))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nodeEnv is this process' environment without the variables that would
// change what Node loads, and with TEXT_DECODER=force: @msgpack/msgpack then
// decodes every str with TextDecoder, so invalid UTF-8 becomes U+FFFD
// whatever the length (by default a str under 200 bytes goes through its own
// decoder, which turns a stray 0xff into U+00FF).
func nodeEnv() []string {
	env := []string{"TEXT_DECODER=force"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NODE_OPTIONS=") || strings.HasPrefix(kv, "NODE_PATH=") || strings.HasPrefix(kv, "TEXT_DECODER=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// line is one line of Output, as server.js writes it.
type line struct {
	Tag    string          `json:"tag"`
	Time   json.RawMessage `json:"time"`
	Record any             `json:"record"`
	Chunk  string          `json:"chunk"`
	Mode   string          `json:"mode"`
}

// Records returns every entry received so far, in the order received,
// across restarts. An entry is in it before the server acks its message.
// Each call parses only what was added since the last one; the Fields maps
// are shared between calls, so do not modify them.
func (s *Server) Records() ([]Record, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if err := s.load(); err != nil {
		return nil, err
	}
	return slices.Clone(s.recs), nil
}

// count is how many entries have been received so far.
func (s *Server) count() (int, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	err := s.load()
	return len(s.recs), err
}

// load parses the lines added to Output since the last call into s.recs.
// The caller holds readMu.
func (s *Server) load() error {
	var err error
	s.read, err = proc.NewLines(s.Output, s.read, func(b []byte) error {
		rec, err := parseLine(b)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", s.Output, len(s.recs)+1, err)
		}
		s.recs = append(s.recs, rec)
		return nil
	})
	if err != nil {
		return fmt.Errorf("forwardserver: %w", err)
	}
	return nil
}

func parseLine(b []byte) (Record, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return Record{}, err
	}
	rec := Record{Tag: l.Tag, Chunk: l.Chunk, Mode: l.Mode}
	if bytes.HasPrefix(l.Time, []byte("[")) {
		var st [2]int64
		if err := json.Unmarshal(l.Time, &st); err != nil {
			return Record{}, fmt.Errorf("time: %w", err)
		}
		rec.Time, rec.EventTime = time.Unix(st[0], st[1]), true
	} else {
		var sec float64
		if err := json.Unmarshal(l.Time, &sec); err != nil {
			return Record{}, fmt.Errorf("time: %w", err)
		}
		whole, frac := math.Modf(sec)
		rec.Time = time.Unix(int64(whole), int64(math.Round(frac*1e9)))
	}
	m, ok := unbin(l.Record).(map[string]any)
	if !ok {
		return Record{}, fmt.Errorf("record is not a map: %#v", l.Record)
	}
	rec.Fields = m
	return rec, nil
}

// unbin turns server.js' {"$bin": base64} back into []byte, at any depth.
func unbin(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if s, ok := v["$bin"].(string); ok && len(v) == 1 {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				return b
			}
		}
		for k, e := range v {
			v[k] = unbin(e)
		}
	case []any:
		for i, e := range v {
			v[i] = unbin(e)
		}
	}
	return v
}

// WaitRecords polls Records until there are at least n and returns them
// all; it fails the test if that takes longer than within.
func (s *Server) WaitRecords(t testing.TB, n int, within time.Duration) []Record {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := s.count()
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			recs, err := s.Records()
			if err != nil {
				t.Fatal(err)
			}
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("forwardserver: %d of %d records after %v; last lines of %s:\n%s", got, n, within, s.Log, s.lastLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) lastLog() string {
	b, err := os.ReadFile(s.Log)
	if err != nil {
		return err.Error()
	}
	return proc.LastLines(string(b), 15)
}

// writeCert writes a self-signed ECDSA certificate for 127.0.0.1 and
// localhost (its own CA) and its PKCS #8 key.
func writeCert(certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "internal/forwardserver test server"},
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

// Script is server.js, for a receiver that runs elsewhere (a pod's image).
func Script() []byte { return slices.Clone(script) }
