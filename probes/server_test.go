package probes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// kubeletMaxBody is how much of a probe's body the kubelet reads.
const kubeletMaxBody = 10 << 10

// coreServe asks as from inside the pod (loopback), which sees reasons.
func coreServe(h http.Handler, method, target string) *httptest.ResponseRecorder {
	return coreServeFrom(h, method, target, "127.0.0.1:40000")
}

func coreServeFrom(h http.Handler, method, target, remote string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	h.ServeHTTP(w, r)
	return w
}

// TestServerPublic: from the pod network (the kubelet, a Service) an answer
// names the failing check but shows no reason, in every format; from
// loopback, the Unix socket and IPv6 loopback the reasons are there.
func TestServerPublic(t *testing.T) {
	_, hd := coreServer(t)
	const detail = "10.0.0.5:3306"
	for _, remote := range []string{"10.244.0.1:5555", "[fd00::1]:5555", "192.0.2.1:1234", "garbage"} {
		for target, want := range map[string]string{
			"/readyz":             "readiness failed: db\n",
			"/readyz?verbose":     "[-]db fail (1.5s ago, took 1ms)\n",
			"/readyz/db":          "readiness failed: db\n",
			"/readyz?format=json": `"reason":"db"`,
		} {
			body := coreServeFrom(hd, "GET", target, remote).Body.String()
			if strings.Contains(body, detail) || strings.Contains(body, "timed out") || strings.Contains(body, "cannot ship") {
				t.Errorf("%s from %s shows a reason: %q", target, remote, body)
			}
			if !strings.Contains(body, want) {
				t.Errorf("%s from %s: %q lacks %q", target, remote, body, want)
			}
		}
	}
	for _, remote := range []string{"127.0.0.1:1", "[::1]:1", "@", ""} {
		if body := coreServeFrom(hd, "GET", "/readyz?verbose", remote).Body.String(); !strings.Contains(body, detail) {
			t.Errorf("from %q the reason is missing: %q", remote, body)
		}
	}
}

// coreJudge publishes one look of check name, as the runner does.
func coreJudge(e *coreEnv, name string, ok bool, reason string, took time.Duration) {
	var err error
	if !ok {
		err = errors.New(reason)
	}
	e.h.recordAt(e.h.gen.Load(), e.h.byName[name], ok, reason, err, took, true)
}

// coreServer is a Health whose checks the test judges by hand (no Run) and
// its handler.
func coreServer(t *testing.T) (*coreEnv, http.Handler) {
	t.Helper()
	spec := func(name string, ps ...Probe) Spec {
		return Spec{Name: name, Probes: ps, Period: 10 * time.Second, Timeout: time.Second, FailureThreshold: 1,
			Checker: newCoreCheck(corePass(""))}
	}
	e := coreNew(t, Config{Checks: []Spec{
		spec("boot", Startup),
		spec("db", Readiness),
		spec("cache", Readiness),
		spec("api", Readiness, Liveness),
	}})
	coreJudge(e, "boot", true, "config rendered", 2*time.Millisecond)
	coreJudge(e, "db", false, "dial tcp 10.0.0.5:3306: connection refused", time.Millisecond)
	coreJudge(e, "cache", false, "timed out after 1s", time.Second)
	coreJudge(e, "api", true, "HTTP 200", 1500*time.Microsecond)
	e.h.SetDegraded("logs", "cannot ship logs")
	e.fc.Step(1500 * time.Millisecond)
	srv, err := NewServer(ServerConfig{Health: e.h, Address: "127.0.0.1:0", Gatherer: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	return e, srv.Handler()
}

func TestServerProbes(t *testing.T) {
	_, hd := coreServer(t)
	tests := []struct {
		method, target string
		code           int
		body           string // the whole body, or with verbose lines to contain
	}{
		{"GET", "/livez", 200, "liveness ok\n"},
		{"GET", "/healthz", 200, "liveness ok\n"},
		{"GET", "/startupz", 200, "startup ok\n"},
		{"GET", "/readyz", 503, "readiness failed: db: dial tcp 10.0.0.5:3306: connection refused\n"},
		{"GET", "/readyz?exclude=db", 503, "readiness failed: cache: timed out after 1s\n"},
		{"GET", "/readyz?exclude=db&exclude=cache", 200, "readiness ok\n"},
		{"GET", "/readyz?exclude=cache&exclude=db&exclude=unknown", 200, "readiness ok\n"},
		{"GET", "/readyz/api", 200, "readiness ok\n"},
		{"GET", "/readyz/db", 503, "readiness failed: db: dial tcp 10.0.0.5:3306: connection refused\n"},
		{"GET", "/livez/agent", 200, "liveness ok\n"},
		{"GET", "/startupz/boot", 200, "startup ok\n"},
		{"GET", "/readyz/nope", 404, "no check named \"nope\"\n"},
		{"GET", "/nope", 404, "404 page not found\n"},
		{"POST", "/readyz", 405, ""},
		{"HEAD", "/readyz", 503, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			w := coreServe(hd, tt.method, tt.target)
			if w.Code != tt.code {
				t.Errorf("status %d, want %d", w.Code, tt.code)
			}
			if tt.body != "" && w.Body.String() != tt.body {
				t.Errorf("body %q, want %q", w.Body.String(), tt.body)
			}
			if w.Code == 200 || w.Code == 503 {
				if got := w.Header().Get("Cache-Control"); got != "no-store" {
					t.Errorf("Cache-Control %q", got)
				}
				if got := w.Header().Get("Content-Type"); got != "text/plain; charset=utf-8" {
					t.Errorf("Content-Type %q", got)
				}
			}
		})
	}
}

// TestServerVerbose: ?verbose gives one line per check with its name,
// state, age, duration and reason; the last line is the verdict.
func TestServerVerbose(t *testing.T) {
	_, hd := coreServer(t)
	tests := []struct {
		target string
		code   int
		lines  []string
	}{
		{"/readyz?verbose", 503, []string{
			"[-]db fail (1.5s ago, took 1ms): dial tcp 10.0.0.5:3306: connection refused",
			"[-]cache fail (1.5s ago, took 1s): timed out after 1s",
			"[+]api pass (1.5s ago, took 1.5ms): HTTP 200",
			"[-]logs degraded: cannot ship logs",
			"readiness failed: db: dial tcp 10.0.0.5:3306: connection refused",
		}},
		{"/readyz?verbose&exclude=db&exclude=cache", 200, []string{
			"[+]api pass (1.5s ago, took 1.5ms): HTTP 200",
			"[-]logs degraded: cannot ship logs",
			"readiness ok",
		}},
		{"/livez?verbose", 200, []string{
			"[+]agent pass (1.5s ago): agent loop running",
			"[+]api pass (1.5s ago, took 1.5ms): HTTP 200",
			"[-]logs degraded: cannot ship logs",
			"liveness ok",
		}},
		{"/startupz?verbose", 200, []string{
			"[+]boot pass (1.5s ago, took 2ms): config rendered",
			"[-]logs degraded: cannot ship logs",
			"startup ok",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			w := coreServe(hd, "GET", tt.target)
			if w.Code != tt.code {
				t.Errorf("status %d, want %d", w.Code, tt.code)
			}
			want := strings.Join(tt.lines, "\n") + "\n"
			if got := w.Body.String(); got != want {
				t.Errorf("body:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestServerJSON(t *testing.T) {
	_, hd := coreServer(t)
	w := coreServe(hd, "GET", "/readyz?format=json")
	if w.Code != 503 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	var got struct {
		Probe  string `json:"probe"`
		Pass   bool   `json:"pass"`
		Reason string `json:"reason"`
		Checks []struct {
			Name, State, Age, Took, Reason string
			Counts                         bool
		} `json:"checks"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, w.Body)
	}
	if got.Probe != "readiness" || got.Pass || !strings.HasPrefix(got.Reason, "db: ") || len(got.Checks) != 4 {
		t.Fatalf("answer %+v", got)
	}
	db := got.Checks[0]
	if db.Name != "db" || db.State != "fail" || db.Age != "1.5s" || db.Took != "1ms" || !db.Counts || !strings.Contains(db.Reason, "refused") {
		t.Errorf("db line %+v", db)
	}
	if logs := got.Checks[3]; logs.Name != "logs" || logs.State != "degraded" || logs.Counts {
		t.Errorf("degraded line %+v", logs)
	}
}

func TestServerMetricsEndpoint(t *testing.T) {
	_, hd := coreServer(t)
	w := coreServe(hd, "GET", "/metrics")
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	for _, want := range []string{
		`kolla_agent_probe_passing{probe="readiness"} 0`,
		`kolla_agent_probe_passing{probe="liveness"} 1`,
		`kolla_agent_check_passing{check="api"} 1`,
		`kolla_agent_check_failures_total{check="db"} 1`,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestServerBodyBounded: whatever the checks say, a body stays under the
// kubelet's 10 KiB, is valid UTF-8, and ends with the verdict.
func TestServerBodyBounded(t *testing.T) {
	var specs []Spec
	for i := range 200 {
		specs = append(specs, Spec{Name: "check-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("0", i/26),
			Probes: []Probe{Startup, Readiness, Liveness}, Period: time.Second, Timeout: time.Second, FailureThreshold: 1,
			Checker: newCoreCheck(corePass(""))})
	}
	e := coreNew(t, Config{Checks: specs})
	reasons := []string{
		strings.Repeat("connection refused ", 5<<10/19),
		strings.Repeat("é", 5<<10/2),               // multi-byte: cut on a rune
		strings.Repeat("<&>\"\n\t\x01", 5<<10/7),   // grows when escaped in JSON
		strings.Repeat("\xff\xfe", 5<<10/2),        // not UTF-8
		strings.Repeat("日本", 5<<10/6) + "\nline 2", // 3-byte runes, a newline
	}
	for i, s := range specs {
		coreJudge(e, s.Name, false, reasons[i%len(reasons)], time.Duration(i)*time.Millisecond)
	}
	e.h.SetGate("stopping", reasons[0])
	e.h.SetDegraded("logs", reasons[2])
	e.fc.Step(time.Second)
	srv, err := NewServer(ServerConfig{Health: e.h, Socket: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	hd := srv.Handler()
	for _, target := range []string{
		"/readyz", "/readyz?verbose", "/readyz?format=json", "/readyz?format=json&verbose",
		"/livez?verbose", "/livez?format=json", "/startupz?verbose", "/startupz?format=json",
		"/readyz/check-a?verbose", "/readyz/check-a?format=json",
	} {
		t.Run(target, func(t *testing.T) {
			w := coreServe(hd, "GET", target)
			body := w.Body.Bytes()
			if w.Code != 503 {
				t.Errorf("status %d, want 503", w.Code)
			}
			if len(body) >= kubeletMaxBody {
				t.Errorf("body of %d bytes, the kubelet reads %d", len(body), kubeletMaxBody)
			}
			if !utf8.Valid(body) {
				t.Error("body is not UTF-8")
			}
			if strings.Contains(target, "json") {
				var rep Report
				if err := json.Unmarshal(body, &rep); err != nil {
					t.Fatalf("invalid JSON: %v", err)
				}
				if rep.Pass || rep.Reason == "" || len(rep.Checks) == 0 {
					t.Errorf("JSON answer pass=%v reason=%q with %d checks", rep.Pass, rep.Reason, len(rep.Checks))
				}
				return
			}
			lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, " failed: ") {
				t.Errorf("last line %q is not the verdict", last)
			}
			if strings.Contains(target, "verbose") && !strings.HasPrefix(target, "/readyz/") &&
				!strings.Contains(string(body), "more checks not shown") {
				t.Error("verbose body does not say checks were left out")
			}
		})
	}
}

// coreServing serves e's Health on loopback TCP and a Unix socket in a
// temporary directory; the test's cleanup shuts it down.
func coreServing(t *testing.T, e *coreEnv, socket string) *Server {
	t.Helper()
	srv, err := NewServer(ServerConfig{Health: e.h, Address: "127.0.0.1:0", Socket: socket, Gatherer: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

// coreSocket is a socket path short enough for sun_path (108 bytes).
func coreSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ka")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "run", "agent.sock")
}

func coreGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerListeners(t *testing.T) {
	e, _ := coreServer(t)
	sock := coreSocket(t)
	srv := coreServing(t, e, sock)
	addrs := srv.Addrs()
	if len(addrs) != 2 || addrs[1] != sock {
		t.Fatalf("Addrs %v", addrs)
	}
	if code, body := coreGet(t, "http://"+addrs[0]+"/readyz"); code != 503 || !strings.HasPrefix(body, "readiness failed: db: ") {
		t.Errorf("TCP /readyz: %d %q", code, body)
	}
	if code, _ := coreGet(t, "http://"+addrs[0]+"/livez"); code != 200 {
		t.Errorf("TCP /livez: %d", code)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want a socket with 0660", fi.Mode())
	}
	body, pass, err := Ask(context.Background(), sock, Liveness, false)
	if err != nil || !pass || body != "liveness ok\n" {
		t.Errorf("Ask over the socket: %q %v %v", body, pass, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Shutdown: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		c.Close()
		t.Error("TCP listener open after Shutdown")
	}
}

// TestServerStaleSocket: a socket file left by an agent that died is
// replaced.
func TestServerStaleSocket(t *testing.T) {
	sock := coreSocket(t)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // as SIGKILL leaves it: the file, nobody listening
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	e, _ := coreServer(t)
	coreServing(t, e, sock)
	if body, pass, err := Ask(context.Background(), sock, Startup, false); err != nil || !pass || body != "startup ok\n" {
		t.Errorf("Ask: %q %v %v", body, pass, err)
	}
}

// TestServerLiveSocket: a socket another agent answers on is not taken
// over, and that agent keeps answering.
func TestServerLiveSocket(t *testing.T) {
	sock := coreSocket(t)
	e, _ := coreServer(t)
	coreServing(t, e, sock)
	other, err := NewServer(ServerConfig{Health: e.h, Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	err = other.Listen()
	if err == nil || !strings.Contains(err.Error(), "another agent is listening") || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Listen on a live socket: %v", err)
	}
	if _, pass, err := Ask(context.Background(), sock, Liveness, false); err != nil || !pass {
		t.Errorf("the first agent no longer answers: %v %v", pass, err)
	}
}

func TestServerNotASocket(t *testing.T) {
	sock := coreSocket(t)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := coreServer(t)
	srv, err := NewServer(ServerConfig{Health: e.h, Address: "127.0.0.1:0", Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(sock); string(b) != "keep me" {
		t.Error("the regular file was touched")
	}
}

// TestServerShutdownBeforeServe: a server stopped before it served (its
// run group stopped at once) returns and leaves nothing listening.
func TestServerShutdownBeforeServe(t *testing.T) {
	sock := coreSocket(t)
	e, _ := coreServer(t)
	srv, err := NewServer(ServerConfig{Health: e.h, Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve after Shutdown did not return")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket is left after Serve returned: %v", err)
	}
}

func TestServerNewRejects(t *testing.T) {
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []ServerConfig{{Address: ":0"}, {Health: h}} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v): no error", cfg)
		}
	}
}

// TestServerJSONBody: the JSON answer is json.Marshal's when it fits, and a
// prefix of the checks when it does not.
func TestServerJSONBody(t *testing.T) {
	line := func(i int, reason string) CheckReport {
		return CheckReport{Name: "c" + string(rune('a'+i%26)), State: "fail", Age: Duration(time.Second), Took: Duration(time.Millisecond), Reason: reason, Counts: true}
	}
	var many []CheckReport
	for i := range 100 {
		many = append(many, line(i, strings.Repeat("<x>", 100)))
	}
	tests := []struct {
		name string
		rep  Report
	}{
		{"no checks", Report{Probe: "liveness", Pass: true}},
		{"one check", Report{Probe: "readiness", Reason: "ca: down", Checks: []CheckReport{line(0, "down")}}},
		{"several", Report{Probe: "readiness", Reason: "ca: down", Checks: []CheckReport{line(0, "down"), line(1, ""), line(2, "x")}}},
		{"too many", Report{Probe: "readiness", Reason: "ca: <x>", Checks: many}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JSONBody(tt.rep)
			if len(got) > maxBody+1 {
				t.Errorf("%d bytes", len(got))
			}
			var back Report
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("%v in %s", err, got)
			}
			want := tt.rep
			if len(back.Checks) < len(want.Checks) {
				if tt.name != "too many" || len(back.Checks) == 0 {
					t.Fatalf("%d of %d checks kept", len(back.Checks), len(want.Checks))
				}
				want.Checks = want.Checks[:len(back.Checks)]
			}
			if want.Checks == nil {
				want.Checks = []CheckReport{}
			}
			wb, _ := json.Marshal(want)
			if string(got) != string(wb)+"\n" {
				t.Errorf("got  %s\nwant %s", got, wb)
			}
		})
	}
}

// TestServerRun: Run serves until its context ends and then stops
// listening; an address that is taken is Run's error at once.
func TestServerRun(t *testing.T) {
	e, _ := coreServer(t)
	srv, err := NewServer(ServerConfig{Health: e.h, Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	taken, err := NewServer(ServerConfig{Health: e.h, Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := taken.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen on "+addr) {
		t.Errorf("Run on a taken address: %v", err)
	}

	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/livez: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return once its context ended")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Error("still listening after Run returned")
	}
}
