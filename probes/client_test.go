package probes

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClientAsk asks a running server over its Unix socket, as the
// exec-probe client does.
func TestClientAsk(t *testing.T) {
	e, _ := coreServer(t)
	sock := coreSocket(t)
	coreServing(t, e, sock)
	tests := []struct {
		probe   Probe
		verbose bool
		pass    bool
		body    string // a prefix
	}{
		{Startup, false, true, "startup ok\n"},
		{Liveness, false, true, "liveness ok\n"},
		{Readiness, false, false, "readiness failed: db: dial tcp 10.0.0.5:3306: connection refused\n"},
		{Readiness, true, false, "[-]db fail (1.5s ago, took 1ms): dial tcp 10.0.0.5:3306: connection refused\n[-]cache fail"},
		{Liveness, true, true, "[+]agent pass"},
	}
	for _, tt := range tests {
		name := tt.probe.String()
		if tt.verbose {
			name += " verbose"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), AskTimeout)
			defer cancel()
			body, pass, err := Ask(ctx, sock, tt.probe, tt.verbose)
			if err != nil {
				t.Fatal(err)
			}
			if pass != tt.pass || !strings.HasPrefix(body, tt.body) {
				t.Errorf("Ask = %v %q, want %v %q...", pass, body, tt.pass, tt.body)
			}
		})
	}
}

// TestClientNoAgent: with nothing answering, Ask fails with an error that
// names the socket.
func TestClientNoAgent(t *testing.T) {
	dir := filepath.Dir(coreSocket(t))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	silent := filepath.Join(dir, "silent.sock")
	sl, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	held := make(chan net.Conn, 1)
	go func() {
		// Accepts and never answers: a hung agent.
		c, err := sl.Accept()
		if err == nil {
			held <- c
		}
	}()
	t.Cleanup(func() {
		select {
		case c := <-held:
			c.Close()
		default:
		}
	})

	tests := []struct {
		name, socket, want string
	}{
		{"no file", filepath.Join(dir, "missing.sock"), "no agent answering on " + filepath.Join(dir, "missing.sock")},
		{"stale socket", stale, "no agent answering on " + stale},
		{"not a socket", dir, "no agent answering on " + dir},
		{"accepts, never answers", silent, silent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			body, pass, err := Ask(ctx, tt.socket, Liveness, false)
			if err == nil || pass || body != "" {
				t.Fatalf("Ask = %q %v %v, want an error", body, pass, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if d := time.Since(t0); d > 3*time.Second {
				t.Errorf("Ask took %v past its context's deadline", d)
			}
		})
	}
}

// TestClientUnexpectedStatus: an answer other than 200 or 503 (not the
// agent, or a bad path) is an error, not a verdict.
func TestClientUnexpectedStatus(t *testing.T) {
	sock := coreSocket(t)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not here", http.StatusNotFound)
	})}
	go srv.Serve(l)
	defer srv.Close()
	body, pass, err := Ask(context.Background(), sock, Readiness, false)
	if err == nil || pass || !strings.Contains(err.Error(), "answered 404") || !strings.Contains(err.Error(), sock) {
		t.Errorf("Ask = %q %v %v, want an error naming the socket and the status", body, pass, err)
	}
}
