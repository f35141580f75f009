package probes

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testHelperEnv makes the test binary a helper process (see TestMain).
const testHelperEnv = "KOLLA_PROBES_TEST_HELPER"

// runTestHelper is the helper process's main. Mode "hold": open -fds=N
// extra descriptors on /dev/null and one TCP connection per -connect=ADDR,
// print "ready", and hold them until stdin ends. With -child the process
// holds nothing itself: it starts a child (same argv[0] and path, so the same
// name) that holds them, and prints "ready CHILDPID".
func runTestHelper(mode string, args []string) int {
	if mode == "load" {
		return runLoad(args)
	}
	if mode != "hold" {
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	var fds int
	var connect, rest []string
	child := false
	for _, a := range args {
		switch {
		case a == "-child":
			child = true
			continue
		case strings.HasPrefix(a, "-fds="):
			fds, _ = strconv.Atoi(strings.TrimPrefix(a, "-fds="))
		case strings.HasPrefix(a, "-connect="):
			connect = append(connect, strings.TrimPrefix(a, "-connect="))
		}
		rest = append(rest, a)
	}
	if child {
		path := os.Args[0]
		if !strings.Contains(path, "/") {
			path, _ = os.Executable()
		}
		cmd := exec.Command(path, rest...)
		cmd.Args[0] = os.Args[0]
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		fmt.Printf("ready %d\n", cmd.Process.Pid)
		_, _ = io.Copy(io.Discard, os.Stdin)
		in.Close()
		_ = cmd.Wait()
		return 0
	}
	var keep []io.Closer
	for range fds {
		f, err := os.Open(os.DevNull)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		keep = append(keep, f)
	}
	for _, a := range connect {
		c, err := net.Dial("tcp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		keep = append(keep, c)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range keep {
		c.Close()
	}
	return 0
}

// lcHelper is a running helper process.
type lcHelper struct {
	cmd   *exec.Cmd
	stdin io.Closer
	pid   int
	child int // with -child
}

// lcStartHelper starts the test binary as a "hold" helper through path
// (a symlink gives it another name), with argv[0] argv0. It is stopped
// when the test ends.
func lcStartHelper(tb testing.TB, path, argv0 string, args ...string) *lcHelper {
	tb.Helper()
	if path == "" {
		var err error
		if path, err = os.Executable(); err != nil {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Args[0] = argv0
	cmd.Env = append(os.Environ(), testHelperEnv+"=hold")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	h := &lcHelper{cmd: cmd, stdin: in, pid: cmd.Process.Pid}
	tb.Cleanup(h.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("helper %v: %v", args, err)
	}
	if f := strings.Fields(line); len(f) == 2 {
		h.child, _ = strconv.Atoi(f[1])
	}
	return h
}

// stop ends the helper (and its child): idempotent.
func (h *lcHelper) stop() {
	h.stdin.Close()
	if h.cmd.ProcessState != nil {
		return
	}
	t := time.AfterFunc(5*time.Second, func() { _ = h.cmd.Process.Kill() })
	defer t.Stop()
	_ = h.cmd.Wait()
}

// kill ends the helper with SIGKILL, as a crash would; its child, if any,
// sees its stdin end and exits.
func (h *lcHelper) kill() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// lcPID is a PIDSource for tests.
type lcPID int

func (p lcPID) PID() int { return int(p) }

// lcAcceptAll accepts connections on ln until it is closed and keeps them
// open until the test ends.
func lcAcceptAll(t testing.TB, ln net.Listener) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
}

func lcListen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	lcAcceptAll(t, ln)
	return ln
}

func lcPort(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

func lcCheck(t *testing.T, c Checker) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Check(ctx)
}

func TestConnectionsHeldByChild(t *testing.T) {
	db := lcListen(t, "tcp", "127.0.0.1:0")
	mq := lcListen(t, "tcp", "127.0.0.1:0")
	unused := lcListen(t, "tcp", "127.0.0.1:0")
	// The parent holds nothing; its forked child holds one connection to
	// db and two to mq, as a worker of uWSGI would.
	h := lcStartHelper(t, "", "probes-conn-parent", "-child",
		"-connect="+db.Addr().String(), "-connect="+mq.Addr().String(), "-connect="+mq.Addr().String())
	if h.child == 0 {
		t.Fatal("helper reported no child")
	}
	src := lcPID(h.pid)
	for _, tc := range []struct {
		name    string
		ports   []int
		min     int
		want    string // detail on a pass, "" if it must fail
		wantErr string
	}{
		{"both", []int{lcPort(db), lcPort(mq)}, 1, fmt.Sprintf("port %d: 1; port %d: 2 established", lcPort(db), lcPort(mq)), ""},
		{"two to mq", []int{lcPort(mq)}, 2, fmt.Sprintf("port %d: 2 established", lcPort(mq)), ""},
		{"not two to db", []int{lcPort(db), lcPort(mq)}, 2, "",
			fmt.Sprintf("port %d: 1 established connections (want >= 2); port %d: 2", lcPort(db), lcPort(mq))},
		{"none to unused", []int{lcPort(unused)}, 1, "",
			fmt.Sprintf("port %d: 0 established connections (want >= 1)", lcPort(unused))},
	} {
		for _, procNet := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/procNet=%v", tc.name, procNet), func(t *testing.T) {
				c := NewConnections(src, tc.ports, tc.min)
				c.procNet = procNet
				detail, err := lcCheck(t, c)
				if tc.wantErr != "" {
					if err == nil || err.Error() != tc.wantErr {
						t.Fatalf("got (%q, %v), want error %q", detail, err, tc.wantErr)
					}
					return
				}
				if err != nil || detail != tc.want {
					t.Fatalf("got (%q, %v), want %q", detail, err, tc.want)
				}
			})
		}
	}
}

// TestConnectionsShellChild is the shape of a real pod: a shell whose forked
// subshell opens the connection (bash's /dev/tcp) and then sleeps.
func TestConnectionsShellChild(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found: Debian always has it; the test needs its /dev/tcp")
	}
	ln := lcListen(t, "tcp", "127.0.0.1:0")
	script := fmt.Sprintf(`(exec 3<>/dev/tcp/127.0.0.1/%d; echo connected; exec sleep 100) & wait`, lcPort(ln))
	cmd := exec.Command(bash, "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	c := NewConnections(lcPID(cmd.Process.Pid), []int{lcPort(ln)}, 1)
	if detail, err := lcCheck(t, c); err != nil {
		t.Fatalf("got (%q, %v), want a pass", detail, err)
	}
}

func TestConnectionsIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback ([::1]), which the connections check must cover: %v", err)
	}
	lcAcceptAll(t, ln)
	h := lcStartHelper(t, "", "probes-conn6", "-child", "-connect="+ln.Addr().String())
	for _, procNet := range []bool{false, true} {
		c := NewConnections(lcPID(h.pid), []int{lcPort(ln)}, 1)
		c.procNet = procNet
		detail, err := lcCheck(t, c)
		if want := fmt.Sprintf("port %d: 1 established", lcPort(ln)); err != nil || detail != want {
			t.Fatalf("procNet=%v: got (%q, %v), want %q", procNet, detail, err, want)
		}
	}
}

func TestConnectionsParseSocketLink(t *testing.T) {
	for in, want := range map[string]uint64{
		"socket:[12345]":                 12345,
		"socket:[0]":                     0,
		"socket:[]":                      0,
		"socket:[12a]":                   0,
		"socket:[99999999999999999999]":  0,
		"pipe:[12345]":                   0,
		"/var/log/keystone/keystone.log": 0,
		"socket:[123":                    0,
		"":                               0,
	} {
		got, ok := parseSocketLink([]byte(in))
		if got != want || ok != (want != 0 || in == "socket:[0]") {
			t.Errorf("parseSocketLink(%q) = %d, %v", in, got, ok)
		}
	}
}

// TestConnectionsParseDiagMessages feeds odd netlink datagrams: errors,
// never panics.
func TestConnectionsParseDiagMessages(t *testing.T) {
	ne := binary.NativeEndian
	msg := func(typ uint16, payload []byte) []byte {
		b := make([]byte, nlmsgHdrLen+len(payload))
		ne.PutUint32(b, uint32(len(b)))
		ne.PutUint16(b[4:], typ)
		copy(b[nlmsgHdrLen:], payload)
		return b
	}
	sock := make([]byte, inetDiagMsgLen)
	sock[diagMsgState] = tcpEstablished
	binary.BigEndian.PutUint16(sock[diagMsgDPort:], 5672)
	ne.PutUint32(sock[diagMsgInode:], 777)
	errno := make([]byte, 4)
	ne.PutUint32(errno, uint32(0xffffffff-uint32(syscall.ENOENT)+1))
	var visited []uint64
	visit := func(p, ino uint64) { visited = append(visited, p, ino) }
	for _, tc := range []struct {
		name    string
		in      []byte
		done    bool
		wantErr bool
	}{
		{"socket then done", append(msg(unix.SOCK_DIAG_BY_FAMILY, sock), msg(unix.NLMSG_DONE, make([]byte, 4))...), true, false},
		{"error", msg(unix.NLMSG_ERROR, errno), false, true},
		{"short socket", msg(unix.SOCK_DIAG_BY_FAMILY, sock[:10]), false, true},
		{"length too big", func() []byte { b := msg(unix.NLMSG_DONE, nil); ne.PutUint32(b, 1000); return b }(), false, true},
		{"length too small", func() []byte { b := msg(unix.NLMSG_DONE, nil); ne.PutUint32(b, 3); return b }(), false, true},
		{"truncated header", []byte{1, 2, 3}, false, false},
		{"empty", nil, false, false},
	} {
		visited = nil
		done, err := parseDiagMessages(tc.in, visit)
		if done != tc.done || (err != nil) != tc.wantErr {
			t.Errorf("%s: got (%v, %v)", tc.name, done, err)
		}
		if tc.name == "socket then done" && (len(visited) != 2 || visited[0] != 5672 || visited[1] != 777) {
			t.Errorf("%s: visited %v", tc.name, visited)
		}
	}
}

func TestConnectionsNoProcess(t *testing.T) {
	if _, err := lcCheck(t, NewConnections(lcPID(os.Getpid()), nil, 1)); err == nil {
		t.Fatal("no ports: passed")
	}
	_, err := lcCheck(t, NewConnections(lcPID(0), []int{5672}, 1))
	if err == nil || err.Error() != "no service process" {
		t.Fatalf("got %v, want no service process", err)
	}
	gone := lcGoneProcess(t)
	_, err = lcCheck(t, NewConnections(lcPID(gone), []int{5672}, 1))
	if want := fmt.Sprintf("pid %d does not exist", gone); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// lcGoneProcess returns the pid of a process that has exited and been reaped.
func lcGoneProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// BenchmarkConnectionsCheck looks at a process holding 1,000 open files, 20
// of them TCP connections to the port checked. fdlist-ns/op is the floor:
// listing that process's /proc/PID/fd, nothing else.
func BenchmarkConnectionsCheck(b *testing.B) {
	ln := lcListen(b, "tcp", "127.0.0.1:0")
	args := []string{"-fds=980"}
	for range 20 {
		args = append(args, "-connect="+ln.Addr().String())
	}
	h := lcStartHelper(b, "", "probes-bench-fds", args...)
	fdDir := filepath.Join("/proc", strconv.Itoa(h.pid), "fd")

	const baseN = 200
	t0 := time.Now()
	for range baseN {
		d, err := os.Open(fdDir)
		if err != nil {
			b.Fatal(err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil || len(names) < 1000 {
			b.Fatalf("%d fds, %v", len(names), err)
		}
	}
	base := float64(time.Since(t0).Nanoseconds()) / baseN

	c := NewConnections(lcPID(h.pid), []int{lcPort(ln)}, 20)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Check(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(base, "fdlist-ns/op")
}
