package probes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServerConfig says where the probe server listens.
type ServerConfig struct {
	// Address is the TCP listener for the kubelet (":8095"); "" for none.
	Address string
	// Socket is the Unix socket of the exec-probe client; "" for none.
	Socket string
	// Health answers the probes; Current, when set, is asked for the
	// Health at each request instead (the agent's own, before the service
	// starts, then the service's).
	Health  *Health
	Current func() *Health
	// Gatherer is served on /metrics; nil serves no metrics.
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
}

// Server serves the probes over HTTP on a TCP address and a Unix socket.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	srv *http.Server

	mu        sync.Mutex
	listeners []net.Listener
	addrs     []string
	closed    bool
}

// NewServer builds the handler; nothing listens until Serve.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Current == nil {
		if cfg.Health == nil {
			return nil, errors.New("probes: server without health")
		}
		h := cfg.Health
		cfg.Current = func() *Health { return h }
	}
	if cfg.Address == "" && cfg.Socket == "" {
		return nil, errors.New("probes: server with neither an address nor a socket")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Handler is the probe and metrics handler, for tests and embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []struct {
		path  string
		probe Probe
	}{{"/livez", Liveness}, {"/healthz", Liveness}, {"/readyz", Readiness}, {"/startupz", Startup}} {
		mux.Handle("GET "+p.path, s.probeHandler(p.probe, false))
		mux.Handle("GET "+p.path+"/{check}", s.probeHandler(p.probe, true))
	}
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

func (s *Server) probeHandler(p Probe, one bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var exclude map[string]bool
		if ex := q["exclude"]; len(ex) > 0 {
			exclude = make(map[string]bool, len(ex))
			for _, n := range ex {
				exclude[n] = true
			}
		}
		only := ""
		if one {
			only = r.PathValue("check")
		}
		rep, err := s.cfg.Current().Evaluate(p, exclude, only)
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		if !trusted(r.RemoteAddr) {
			rep = rep.Public()
		}
		code := http.StatusOK
		if !rep.Pass {
			code = http.StatusServiceUnavailable
		}
		_, verbose := q["verbose"]
		var body []byte
		if q.Get("format") == "json" {
			h.Set("Content-Type", "application/json")
			body = JSONBody(rep)
		} else {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			body = TextBody(rep, verbose)
		}
		w.WriteHeader(code)
		w.Write(body)
	})
}

// trusted reports whether a request came over the Unix socket (the
// exec-probe client, `kubectl exec`) or from loopback (inside the pod): only
// they see reasons. The kubelet, a Service or anyone on the pod network sees
// the names and states of the checks.
func trusted(remote string) bool {
	if remote == "" || remote == "@" || strings.HasPrefix(remote, "/") {
		return true // a Unix socket's peer has no address
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// TextBody is a probe's answer as text: "ok" or the reason it fails; with
// verbose one line per check ("[+]api pass (1.2s ago, took 3ms): HTTP 200"),
// as kube-apiserver's ?verbose does. At most maxBody bytes.
func TextBody(rep Report, verbose bool) []byte {
	var b bytes.Buffer
	if verbose {
		for i, c := range rep.Checks {
			mark := "+"
			if c.State == "fail" || (c.State == "pending" && rep.Probe != "liveness") || c.State == "degraded" {
				mark = "-"
			}
			line := fmt.Sprintf("[%s]%s %s", mark, c.Name, c.State)
			var when []string
			if c.Age > 0 {
				when = append(when, time.Duration(c.Age).Round(time.Millisecond).String()+" ago")
			}
			if c.Took > 0 {
				when = append(when, "took "+time.Duration(c.Took).Round(time.Microsecond).String())
			}
			if len(when) > 0 {
				line += " (" + strings.Join(when, ", ") + ")"
			}
			if c.Reason != "" {
				line += ": " + oneLine(clip(c.Reason, maxReason))
			}
			if b.Len()+len(line)+200 > maxBody {
				fmt.Fprintf(&b, "... %d more checks not shown\n", len(rep.Checks)-i)
				break
			}
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	if rep.Pass {
		fmt.Fprintf(&b, "%s ok\n", rep.Probe)
	} else {
		fmt.Fprintf(&b, "%s failed: %s\n", rep.Probe, oneLine(clip(rep.Reason, maxReason)))
	}
	return b.Bytes()
}

// JSONBody is a probe's answer as JSON, bounded like TextBody: the checks
// that do not fit are left out.
func JSONBody(rep Report) []byte {
	rep.Reason = clip(rep.Reason, maxReason)
	all := rep.Checks
	// Clip while the whole may fit: names and reasons alone are a lower
	// bound of its size.
	clipped := make([]CheckReport, 0, len(all))
	least := len(rep.Reason)
	for _, c := range all {
		c.Reason = clip(c.Reason, maxReason)
		if least += len(c.Name) + len(c.Reason); least > maxBody {
			break
		}
		clipped = append(clipped, c)
	}
	if len(clipped) == len(all) {
		rep.Checks = clipped
		if b, _ := json.Marshal(rep); len(b) <= maxBody {
			return append(b, '\n')
		}
	}
	// Too big: as many checks as fit, each marshalled once.
	rep.Checks = []CheckReport{}
	b, _ := json.Marshal(rep)
	b = b[:len(b)-2] // `]}`: checks is the last field
	for i, c := range all {
		c.Reason = clip(c.Reason, maxReason)
		cb, _ := json.Marshal(c)
		if len(b)+1+len(cb)+3 > maxBody {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, cb...)
	}
	return append(b, "]}\n"...)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Listen opens the listeners. A Unix socket left behind by an agent that is
// gone (SIGKILL) is replaced; one an agent still answers on is an error.
// After Shutdown it opens nothing.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.listeners) > 0 || s.closed {
		return nil // after Shutdown nothing would close them
	}
	var ls []net.Listener
	fail := func(err error) error {
		for _, l := range ls {
			l.Close()
		}
		return err
	}
	if s.cfg.Address != "" {
		l, err := net.Listen("tcp", s.cfg.Address)
		if err != nil {
			return fail(fmt.Errorf("probes: listen on %s: %w", s.cfg.Address, err))
		}
		ls = append(ls, l)
	}
	if s.cfg.Socket != "" {
		l, err := listenUnix(s.cfg.Socket)
		if err != nil {
			return fail(err)
		}
		ls = append(ls, l)
	}
	s.listeners = ls
	s.addrs = nil
	for _, l := range ls {
		s.addrs = append(s.addrs, l.Addr().String())
	}
	return nil
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("probes: socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("probes: socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("probes: socket %s: another agent is listening on it", path)
		}
		os.Remove(path) // left by an agent that died
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("probes: listen on %s: %w", path, err)
	}
	// Unlinked by Close; an exec probe runs as the container's user.
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("probes: socket %s: %w", path, err)
	}
	return l, nil
}

// Addrs are the addresses listened on (after Listen).
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Serve listens (if Listen was not called) and serves until Shutdown.
func (s *Server) Serve() error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	ls := s.listeners
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil
	}
	s.log.Info("serving probes", "addresses", strings.Join(s.Addrs(), " "))
	errc := make(chan error, len(ls))
	for _, l := range ls {
		go func() { errc <- s.srv.Serve(l) }()
	}
	var first error
	for range ls {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) && first == nil {
			first = err
			s.srv.Close() // one listener failing ends the others, for a clean retry
		}
	}
	return first
}

// Run serves until ctx ends, then shuts down, letting requests in flight
// finish for up to 2s. An error before that (the address is taken) is
// returned: the agent serves each listener as a duty of its own, which
// starts it again.
func (s *Server) Run(ctx context.Context) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s.Shutdown(sctx)
		case <-done:
		}
	}()
	return s.Serve()
}

// Shutdown stops the server, letting requests in flight finish (bounded by
// ctx). The agent calls it last, so probes answer through the whole stop.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	for _, l := range ls {
		l.Close() // in case Serve never took them; a second Close is harmless
	}
	return err
}
