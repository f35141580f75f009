package ask

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve answers each connection on a Unix socket with answer, after
// reading the request, and returns the socket's path and the requests.
func serve(t *testing.T, answer string) (string, <-chan string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	reqs := make(chan string, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			reqs <- string(buf[:n])
			c.Write([]byte(answer))
			c.Close()
		}
	}()
	return sock, reqs
}

func TestAskAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, answer, body string
		pass               bool
		err                string
	}{
		{"pass", "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nreadiness ok\n", "readiness ok\n", true, ""},
		{"fail", "HTTP/1.0 503 Service Unavailable\r\n\r\nreadiness failed: db\n", "readiness failed: db\n", false, ""},
		{"bare newlines", "HTTP/1.1 200 OK\nX: y\n\nok", "ok", true, ""},
		{"other status", "HTTP/1.0 404 Not Found\r\n\r\nno\n", "no\n", false, "answered 404 Not Found"},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n", "", false, "not an HTTP answer"},
		{"bad code", "HTTP/1.0 2xx OK\r\n\r\n", "", false, "bad status line"},
		{"cut in the headers", "HTTP/1.0 200 OK\r\nX: y", "", false, "headers"},
		{"nothing", "", "", false, "did not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, reqs := serve(t, tc.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			body, pass, err := Ask(ctx, sock, "readiness", true)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), sock) {
					t.Fatalf("error %v, want one naming the socket and %q", err, tc.err)
				}
				return
			}
			if err != nil || body != tc.body || pass != tc.pass {
				t.Fatalf("Ask = %q %v %v, want %q %v", body, pass, err, tc.body, tc.pass)
			}
			if req := <-reqs; !strings.HasPrefix(req, "GET /readyz?verbose HTTP/1.0\r\n") {
				t.Errorf("request %q", req)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	sock, _ := serve(t, "HTTP/1.0 503 Service Unavailable\r\n\r\nreadiness failed: starting\n")
	none := filepath.Join(t.TempDir(), "none.sock")
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("probes:\n  socket: "+sock+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		args         []string
		code         int
		out, errText string
	}{
		{"fails", []string{"readiness", "--socket", sock}, 1, "readiness failed: starting\n", ""},
		{"flags first", []string{"--socket", sock, "readiness", "--verbose"}, 1, "readiness failed: starting\n", ""},
		{"socket from the config", []string{"readiness", "--config", cfg}, 1, "readiness failed: starting\n", ""},
		{"no agent", []string{"liveness", "--socket", none}, 1, "", "no agent answering on " + none},
		{"unknown probe", []string{"health"}, 1, "", `unknown probe "health"`},
		{"no probe", []string{"--socket", sock}, 1, "", `unknown probe ""`},
		{"extra argument", []string{"readiness", "now"}, 1, "", "unexpected arguments"},
		{"bad flag", []string{"readiness", "--nope"}, 1, "", "flag provided but not defined"},
		{"help", []string{"--help"}, 0, "", "Usage: p startup|readiness|liveness"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Command("p", tc.args, &out, &errb, SocketFromConfig)
			if code != tc.code || out.String() != tc.out || !strings.Contains(errb.String(), tc.errText) {
				t.Errorf("code %d out %q err %q; want %d %q and an error with %q", code, out.String(), errb.String(), tc.code, tc.out, tc.errText)
			}
		})
	}
}

func TestSocketFromConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, yaml, want string }{
		{"block", "probes:\n  socket: /run/x.sock\n", "/run/x.sock"},
		{"flow", "probes: {socket: /run/y.sock, address: ':8095'}\n", "/run/y.sock"},
		{"off", "probes:\n  socket: off\n", DefaultSocket},
		{"unset", "probes:\n  address: :8095\n", DefaultSocket},
		{"not YAML", "probes: [\n", DefaultSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := SocketFromConfig(p); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if got := SocketFromConfig(filepath.Join(dir, "missing.yaml")); got != DefaultSocket {
		t.Errorf("missing file: %q", got)
	}
}

// FuzzStatusCode: any status line gives a code in 100..599 or an error.
func FuzzStatusCode(f *testing.F) {
	for _, s := range []string{"HTTP/1.0 200 OK\r\n", "HTTP/1.1 503 Service Unavailable\n", "HTTP/1.0 99 x", "garbage"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		code, err := statusCode(line)
		if err == nil && (code < 100 || code > 599) {
			t.Fatalf("%q: code %d", line, code)
		}
	})
}
