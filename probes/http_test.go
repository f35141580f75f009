package probes

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// lcHTTPServer serves the answers the HTTP check tests need, and counts the
// connections opened to it.
func lcHTTPServer(t *testing.T, tlsOn bool) (*httptest.Server, *lcConnCount) {
	var conns lcConnCount
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"status": "ok"}`) })
	mux.HandleFunc("/unavailable", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/unavailable", http.StatusFound) })
	mux.HandleFunc("/host", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "keystone.example:5000" {
			w.WriteHeader(http.StatusMisdirectedRequest)
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, strings.Repeat("x", httpBodyLimit), "MARKER")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the TLS tests' refused handshakes
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.opened.Add(1)
		case http.StateClosed:
			conns.closed.Add(1)
		}
	}
	if tlsOn {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, &conns
}

type lcConnCount struct{ opened, closed atomic.Int32 }

func lcNewHTTP(t *testing.T, cfg HTTPConfig) *HTTPCheck {
	t.Helper()
	c, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHTTPCheck(t *testing.T) {
	srv, _ := lcHTTPServer(t, false)
	for _, tc := range []struct {
		name    string
		cfg     HTTPConfig
		detail  string
		wantErr string
	}{
		{"ok", HTTPConfig{URL: srv.URL + "/ok"}, "HTTP 200", ""},
		{"503", HTTPConfig{URL: srv.URL + "/unavailable"}, "",
			"HTTP 503 from " + srv.URL + "/unavailable (want 2xx or 3xx)"},
		{"503 expected", HTTPConfig{URL: srv.URL + "/unavailable", ExpectStatus: []int{503}}, "HTTP 503", ""},
		// The redirect is the answer: not followed to the 503 it points at.
		{"redirect passes", HTTPConfig{URL: srv.URL + "/redirect"}, "HTTP 302", ""},
		{"redirect unwanted", HTTPConfig{URL: srv.URL + "/redirect", ExpectStatus: []int{200, 204}}, "",
			"HTTP 302 from " + srv.URL + "/redirect (want 200, 204)"},
		{"body matches", HTTPConfig{URL: srv.URL + "/ok", BodyRegex: `"status":\s*"ok"`}, "HTTP 200", ""},
		{"body does not match", HTTPConfig{URL: srv.URL + "/ok", BodyRegex: `"status":\s*"up"`}, "",
			`HTTP 200 from ` + srv.URL + `/ok: body does not match "\"status\":\\s*\"up\""`},
		{"body beyond the limit", HTTPConfig{URL: srv.URL + "/big", BodyRegex: "MARKER"}, "",
			`HTTP 200 from ` + srv.URL + `/big: body does not match "MARKER"`},
		{"host header", HTTPConfig{URL: srv.URL + "/host", Host: "keystone.example:5000"}, "HTTP 200", ""},
		{"no host header", HTTPConfig{URL: srv.URL + "/host"}, "",
			"HTTP 421 from " + srv.URL + "/host (want 2xx or 3xx)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			detail, err := lcCheck(t, lcNewHTTP(t, tc.cfg))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("got (%q, %v), want error %q", detail, err, tc.wantErr)
				}
				return
			}
			if err != nil || detail != tc.detail {
				t.Fatalf("got (%q, %v), want %q", detail, err, tc.detail)
			}
		})
	}
}

func TestHTTPCheckFailures(t *testing.T) {
	srv, _ := lcHTTPServer(t, false)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := lcNewHTTP(t, HTTPConfig{URL: srv.URL + "/slow"}).Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "/slow") || time.Since(start) > 5*time.Second {
		t.Fatalf("slow answer: got %v after %v, want a timeout naming the URL", err, time.Since(start))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/"
	ln.Close()
	if _, err := lcCheck(t, lcNewHTTP(t, HTTPConfig{URL: url})); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("closed port: got %v, want connection refused", err)
	}
}

// TestHTTPCheckKeepAlive: successive looks reuse one connection, and Close
// drops it.
func TestHTTPCheckKeepAlive(t *testing.T) {
	srv, conns := lcHTTPServer(t, false)
	c := lcNewHTTP(t, HTTPConfig{URL: srv.URL + "/ok"})
	for range 3 {
		if _, err := lcCheck(t, c); err != nil {
			t.Fatal(err)
		}
	}
	// Nor does a redirect (its body is read, not left on the connection).
	c2 := lcNewHTTP(t, HTTPConfig{URL: srv.URL + "/redirect"})
	for range 3 {
		if _, err := lcCheck(t, c2); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.opened.Load(); n != 2 {
		t.Fatalf("%d connections for 6 looks of 2 checks, want 2", n)
	}
	if n := conns.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed before Close", n)
	}
	c.Close()
	c2.Close()
	lcWaitFor(t, "the checks' idle connections to close", func() bool { return conns.closed.Load() == 2 })
}

func TestHTTPCheckTLS(t *testing.T) {
	srv, _ := lcHTTPServer(t, true)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     HTTPConfig
		wantErr string
	}{
		{"ca file", HTTPConfig{URL: srv.URL + "/ok", CAFile: caFile}, ""},
		// httptest's certificate is for example.com and 127.0.0.1: a Host
		// override is also the name the certificate is checked against.
		{"ca file and host", HTTPConfig{URL: srv.URL + "/ok", CAFile: caFile, Host: "example.com"}, ""},
		{"ca file and wrong host", HTTPConfig{URL: srv.URL + "/ok", CAFile: caFile, Host: "keystone.example"}, "keystone.example"},
		{"system roots", HTTPConfig{URL: srv.URL + "/ok"}, "certificate"},
		{"insecure", HTTPConfig{URL: srv.URL + "/ok", InsecureSkipVerify: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			detail, err := lcCheck(t, lcNewHTTP(t, tc.cfg))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want a pass", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got (%q, %v), want an error with %q", detail, err, tc.wantErr)
			}
		})
	}
}

func TestNewHTTPConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		cfg  HTTPConfig
		want string
	}{
		{"no scheme", HTTPConfig{URL: "127.0.0.1:5000/v3"}, "127.0.0.1:5000/v3"},
		{"ftp", HTTPConfig{URL: "ftp://127.0.0.1/"}, "ftp://127.0.0.1/"},
		{"bad url", HTTPConfig{URL: "http://[::1"}, "url"},
		// net/url's own text would quote the password's start as a port.
		{"bad url, '#' in the password", HTTPConfig{URL: "http://admin:S3cr#et@h/"}, `url "http://admin:***@h/": invalid port ... after host`},
		{"ftp with a password", HTTPConfig{URL: "ftp://u:S3cret@h/"}, `url "ftp://u:***@h/"`},
		{"status", HTTPConfig{URL: "http://127.0.0.1/", ExpectStatus: []int{2000}}, "expectStatus 2000"},
		{"regex", HTTPConfig{URL: "http://127.0.0.1/", BodyRegex: "("}, "bodyRegex"},
		{"missing ca", HTTPConfig{URL: "https://127.0.0.1/", CAFile: missing}, missing},
		{"invalid ca", HTTPConfig{URL: "https://127.0.0.1/", CAFile: notPEM}, notPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewHTTP(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
}
