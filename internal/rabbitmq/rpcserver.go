package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
)

// RPCServerOptions configures a real oslo.messaging RPC server.
type RPCServerOptions struct {
	Topic  string // required
	Server string // required: the routing key is Topic.Server
	// ControlExchange is [DEFAULT] control_exchange; empty leaves
	// oslo.messaging's default ("openstack").
	ControlExchange string
	// PingEnabled sets [DEFAULT] rpc_ping_enabled = true: the dispatcher
	// then answers oslo_rpc_server_ping with "pong".
	PingEnabled bool
	// TransportURL defaults to the broker's URL.
	TransportURL string
}

// RPCServer is a running rpcserver.py. Its endpoints: echo and fail (raises
// ValueError) in the default namespace, version 1.0; ping in namespace
// "baseapi", version 1.1 (nova's BaseAPI); oslo_rpc_server_ping with
// PingEnabled.
type RPCServer struct {
	// ConfigFile is the oslo config file the server reads: the file a
	// service's agent would read too.
	ConfigFile string
	s          *Server
	p          *proc.Process
}

// WriteOsloConfig writes an oslo config file for o in the server's
// directory and returns its path.
func (s *Server) WriteOsloConfig(o RPCServerOptions) (string, error) {
	if o.TransportURL == "" {
		o.TransportURL = s.URL()
	}
	var b strings.Builder
	b.WriteString("# written by internal/rabbitmq\n[DEFAULT]\n")
	// '$' is oslo.config's substitution character: "$$" is a literal one.
	fmt.Fprintf(&b, "transport_url = %s\n", strings.ReplaceAll(o.TransportURL, "$", "$$"))
	if o.ControlExchange != "" {
		fmt.Fprintf(&b, "control_exchange = %s\n", o.ControlExchange)
	}
	fmt.Fprintf(&b, "rpc_ping_enabled = %t\n", o.PingEnabled)
	if o.Server != "" {
		fmt.Fprintf(&b, "host = %s\n", o.Server)
	}
	f, err := os.CreateTemp(s.Dir, "oslo-*.conf")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}

// StartRPCServer starts an RPC server and waits until it consumes.
func (s *Server) StartRPCServer(o RPCServerOptions) (*RPCServer, error) {
	if o.Topic == "" || o.Server == "" {
		return nil, errors.New("rabbitmq: an RPC server needs a topic and a server")
	}
	conf, err := s.WriteOsloConfig(o)
	if err != nil {
		return nil, err
	}
	ready := strings.TrimSuffix(conf, ".conf") + ".ready"
	base := strings.TrimSuffix(filepath.Base(conf), ".conf")
	p, err := startProcess("rpcserver "+o.Topic+"."+o.Server,
		[]string{Python, filepath.Join(s.Dir, "rpcserver.py"), "--config-file", conf, "--topic", o.Topic, "--server", o.Server, "--ready", ready},
		s.env, s.Dir, filepath.Join(s.Dir, "rpcserver-"+base+".log"), nil)
	if err != nil {
		return nil, err
	}
	rs := &RPCServer{ConfigFile: conf, s: s, p: p}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		stop(p, 0)
		return nil, errors.New("rabbitmq: server stopped")
	}
	s.rpc[rs] = true
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return rs, nil
		}
		if p.Exited() {
			rs.forget()
			return nil, p.ExitError()
		}
		if time.Now().After(deadline) {
			rs.Kill()
			return nil, fmt.Errorf("rabbitmq: RPC server %s.%s not ready after 60s; last lines of %s:\n%s",
				o.Topic, o.Server, p.Log, proc.LastLines(p.Output(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server gracefully (SIGTERM: it cancels its consumers; its
// queues stay, as a stopped service's do).
func (p *RPCServer) Stop() error {
	if p.p.Exited() {
		p.forget()
		return nil
	}
	_ = p.Resume()
	err := stop(p.p, 15*time.Second)
	p.forget()
	return err
}

// Kill kills the server's process group.
func (p *RPCServer) Kill() error {
	err := stop(p.p, 0)
	p.forget()
	return err
}

// Pause stops the process (SIGSTOP): a hung server, whose connection stays.
func (p *RPCServer) Pause() error { return p.p.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (p *RPCServer) Resume() error { return p.p.Signal(syscall.SIGCONT) }

// Output is what the server has logged.
func (p *RPCServer) Output() string { return p.p.Output() }

func (p *RPCServer) forget() {
	p.s.mu.Lock()
	delete(p.s.rpc, p)
	p.s.mu.Unlock()
}

// RPCCallResult is how one Python RPC call went.
type RPCCallResult struct {
	Output   string
	ExitCode int
	// CPU is the user+system CPU time of the Python process.
	CPU  time.Duration
	Wall time.Duration
}

// RunRPCClient runs rpcclient.py: one oslo.messaging call of method to
// topic.server, as an exec probe makes it, with the transport of configFile.
func (s *Server) RunRPCClient(ctx context.Context, configFile, topic, server, method string) (RPCCallResult, error) {
	cmd := exec.CommandContext(ctx, Python, filepath.Join(s.Dir, "rpcclient.py"),
		"--config-file", configFile, "--topic", topic, "--server", server, "--method", method, "--timeout", "10")
	cmd.Env = s.env
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	res := RPCCallResult{Output: out.String(), Wall: time.Since(began)}
	if cmd.ProcessState == nil {
		return res, err
	}
	res.ExitCode = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return res, err
	}
	return res, nil
}

// String describes the result for a test log.
func (r RPCCallResult) String() string {
	return "exit " + strconv.Itoa(r.ExitCode) + ", cpu " + r.CPU.String() + ", wall " + r.Wall.String() + ": " + strings.TrimSpace(r.Output)
}
