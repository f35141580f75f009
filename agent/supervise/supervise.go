package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultGrace is the time between SIGTERM and SIGKILL when Config.Grace is 0,
// the same as `docker stop`.
const DefaultGrace = 10 * time.Second

// DefaultPath is searched for the command when Config.Env has no PATH; it is
// the PATH container runtimes give a container whose image sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// killWait bounds how long Run waits for the group to go after SIGKILL:
// only a process stuck in the kernel (D state) takes longer, and Run must
// return to let the agent exit.
const killWait = 5 * time.Second

// groupRecheck is how often Run looks whether the group is gone once the main
// process has ended.
const groupRecheck = 100 * time.Millisecond

// DefaultSignals are forwarded when Config.Signals is nil.
func DefaultSignals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}
}

// ForwardedSignals are DefaultSignals but SIGTERM, for a supervisor whose
// SIGTERM is the caller's: the agent's stops its steady state, which fails
// readiness first and then stops the service (Stop).
func ForwardedSignals() []os.Signal {
	var out []os.Signal
	for _, s := range DefaultSignals() {
		if s != syscall.SIGTERM {
			out = append(out, s)
		}
	}
	return out
}

// Config is what to run and how.
type Config struct {
	// Command is the program and its arguments; Command[0] without a slash is
	// looked up in the PATH of Env.
	Command []string
	// Env is the child's whole environment, as KEY=VALUE (see the package
	// documentation).
	Env []string
	// Dir is the child's working directory; empty means the agent's.
	Dir string
	// Credential is the user the child runs as: its uid, gid and
	// supplementary groups (Name and Home are for the caller's Env and the
	// log); nil runs it as the agent runs.
	Credential *Identity
	// QuietArgs logs the program without its arguments: they may have
	// come from a template that read a Secret (a bootstrap command).
	QuietArgs bool
	// Grace is the time between SIGTERM and SIGKILL; 0 means DefaultGrace.
	Grace time.Duration
	// Logger receives the supervisor's own events; nil discards them.
	Logger *slog.Logger
	// Signals are forwarded to the child's process group; nil means
	// DefaultSignals. SIGTERM among them starts the stop sequence.
	Signals []os.Signal
	// Stdout and Stderr receive the child's output through a pipe; nil
	// gives the child the agent's own (no copying).
	Stdout, Stderr io.Writer
}

// Supervisor runs one child once.
type Supervisor struct {
	command []string
	quiet   bool // QuietArgs
	env     []string
	dir     string
	cred    *Identity
	grace   time.Duration
	log     *slog.Logger
	signals []os.Signal
	stdout  io.Writer
	stderr  io.Writer
	copying sync.WaitGroup // the output copiers, when there are pipes

	stopCh chan struct{}   // closed by the first Stop
	done   chan struct{}   // closed when Run returns
	sigCh  chan sigRequest // Signal's requests, served by Run's loop

	mu      sync.Mutex
	started bool
	stopped bool

	pid atomic.Int64 // the main child while it runs

	running chan struct{} // closed when the child has started

	spawnMu sync.Mutex
	reaping bool // Run's loop is collecting children: Start may fork
	spawned map[int]chan syscall.WaitStatus
}

// New checks cfg and returns a Supervisor ready to Run.
func New(cfg Config) (*Supervisor, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("supervise: no command")
	}
	for i, a := range cfg.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("supervise: command argument %d contains a NUL byte", i)
		}
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("supervise: negative grace period %v", cfg.Grace)
	}
	env, err := cleanEnv(cfg.Env)
	if err != nil {
		return nil, err
	}
	sigs := cfg.Signals
	if sigs == nil {
		sigs = DefaultSignals()
	}
	for _, sig := range sigs {
		s, ok := sig.(syscall.Signal)
		if !ok {
			return nil, fmt.Errorf("supervise: signal %v is not a Unix signal", sig)
		}
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP:
			return nil, fmt.Errorf("supervise: signal %v cannot be caught, so cannot be forwarded", s)
		case syscall.SIGCHLD:
			return nil, errors.New("supervise: SIGCHLD cannot be forwarded: the reaper needs it")
		}
	}
	s := &Supervisor{
		command: append([]string(nil), cfg.Command...),
		quiet:   cfg.QuietArgs,
		env:     env,
		dir:     cfg.Dir,
		grace:   cfg.Grace,
		log:     cfg.Logger,
		signals: append([]os.Signal(nil), sigs...),
		stdout:  cfg.Stdout,
		stderr:  cfg.Stderr,
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		sigCh:   make(chan sigRequest),
		spawned: map[int]chan syscall.WaitStatus{},
		running: make(chan struct{}),
	}
	if cfg.Credential != nil {
		id := *cfg.Credential
		id.Credential.Groups = append([]uint32{}, cfg.Credential.Credential.Groups...)
		s.cred = &id
	}
	if s.grace == 0 {
		s.grace = DefaultGrace
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Stop starts the stop sequence: SIGTERM to the child's process group, then
// SIGKILL after the grace period. It does not wait (see Done). It may be
// called any number of times, before, during or after Run; before Run, Run
// starts nothing.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		close(s.stopCh)
	}
}

type sigRequest struct {
	sig  syscall.Signal
	sent chan error
}

// Signal sends sig to the child's process group (a reload: SIGHUP,
// SIGUSR1), through Run's loop, which alone knows whether the group still
// exists. It fails when the child is not running or is being stopped.
func (s *Supervisor) Signal(ctx context.Context, sig syscall.Signal) error {
	req := sigRequest{sig: sig, sent: make(chan error, 1)}
	select {
	case s.sigCh <- req:
		return <-req.sent
	case <-s.done:
		return errors.New("supervise: the service has ended")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when Run has returned, so that a caller of Stop can wait for
// the child to be gone.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// Run starts the child and returns when it has ended, with its exit code or
// 128+N when signal N killed it. Cancelling ctx stops the child as Stop does;
// Run still returns the child's code. Run may be called once.
func (s *Supervisor) Run(ctx context.Context) (exitCode int, err error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return 1, errors.New("supervise: Run called twice")
	}
	s.started = true
	stopped := s.stopped
	s.mu.Unlock()
	defer close(s.done)
	if stopped {
		return 1, errors.New("supervise: stopped before the child was started")
	}

	// Both before the child exists, so that neither its exit nor a signal
	// meant for it is missed.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	fwd := make(chan os.Signal, 16)
	signal.Notify(fwd, s.signals...)
	defer signal.Stop(fwd)

	becomeSubreaper(s.log)

	pid, code, err := s.start()
	if err != nil {
		return code, err
	}
	s.pid.Store(int64(pid))
	s.setReaping(true)
	defer s.setReaping(false)
	defer s.pid.Store(0)
	l := &loop{s: s, pid: pid}
	code, err = l.run(ctx, chld, fwd)
	s.drain()
	return code, err
}

// drain waits for the output copiers to reach the end of the pipes, but not
// for long: a process that left the group may hold them open.
func (s *Supervisor) drain() {
	done := make(chan struct{})
	go func() { s.copying.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainWait):
		s.log.Warn("output of the command still open after it ended; not waiting for it", "waited", drainWait)
	}
}

// drainWait bounds drain.
const drainWait = 2 * time.Second

// loop is the state of one Run, touched only by Run's goroutine: it is the
// one goroutine that waits for children, so the main child's status needs no
// hand-over between goroutines and no signal is ever sent to a process group
// whose leader might already have been reaped.
type loop struct {
	s   *Supervisor
	pid int // the main child's pid, which is also its process group id

	exited   bool
	status   syscall.WaitStatus
	stopping bool
	graceC   <-chan time.Time // fires SIGKILL; nil until the stop sequence starts
}

func (l *loop) run(ctx context.Context, chld, fwd <-chan os.Signal) (int, error) {
	ctxDone := ctx.Done()
	stopCh := (<-chan struct{})(l.s.stopCh)
	var giveUpC, recheckC <-chan time.Time
	// Zombies from before Notify raise no further SIGCHLD.
	if err := l.reap(); err != nil {
		return 1, err
	}
	for {
		if l.exited {
			if !l.groupAlive() {
				return statusCode(l.status), nil
			}
			l.stop("main process ended; stopping the rest of its process group")
			if recheckC == nil {
				// A member whose parent is not the agent ends without a
				// SIGCHLD here: look again now and then.
				t := time.NewTicker(groupRecheck)
				defer t.Stop()
				recheckC = t.C
			}
		}
		select {
		case <-chld:
			if err := l.reap(); err != nil {
				return 1, err
			}
		case req := <-l.s.sigCh:
			switch {
			case l.exited:
				req.sent <- errors.New("supervise: the service has exited")
			case l.stopping:
				req.sent <- errors.New("supervise: the service is being stopped")
			default:
				l.s.log.Info("signalling the service", "signal", req.sig.String(), "pgid", l.pid)
				l.signal(req.sig)
				req.sent <- nil
			}
		case sig := <-fwd:
			l.s.log.Debug("signal received", "signal", sig.String())
			if sig == syscall.SIGTERM {
				l.stop("SIGTERM received; stopping the service")
				continue
			}
			l.signal(sig)
		case <-ctxDone:
			ctxDone = nil
			l.stop("context cancelled; stopping the service")
		case <-stopCh:
			stopCh = nil
			l.stop("stop requested; stopping the service")
		case <-recheckC:
		case <-l.graceC:
			l.graceC = nil
			l.s.log.Warn("grace period over; sending SIGKILL to the process group", "pgid", l.pid, "grace", l.s.grace)
			l.signal(syscall.SIGKILL)
			giveUpC = time.After(killWait)
		case <-giveUpC:
			if !l.exited {
				return 128 + int(syscall.SIGKILL), fmt.Errorf("supervise: pid %d still running %v after SIGKILL", l.pid, killWait)
			}
			l.s.log.Warn("processes of the group still present after SIGKILL; leaving them", "pgid", l.pid, "waited", killWait)
			return statusCode(l.status), nil
		}
	}
}

// stop starts the stop sequence once: the one SIGTERM, and the timer for
// SIGKILL. Later calls do nothing, so the group never gets a second SIGTERM
// when, say, the kubelet's SIGTERM also cancels the agent's context.
func (l *loop) stop(why string) {
	if l.stopping {
		return
	}
	l.stopping = true
	l.s.log.Info(why, "pgid", l.pid, "grace", l.s.grace)
	l.signal(syscall.SIGTERM)
	// Go collects an unstopped timer with the loop.
	l.graceC = time.After(l.s.grace)
}

// signal sends sig to the child's process group; a failure is logged, never
// fatal. While the main child lives it is also signalled on its own if it has
// left its group, so that a stop always reaches it.
func (l *loop) signal(sig os.Signal) {
	s := sig.(syscall.Signal)
	if l.exited && !l.groupAlive() {
		return
	}
	err := syscall.Kill(-l.pid, s)
	switch {
	case err == nil:
		l.s.log.Debug("signal forwarded", "signal", s.String(), "pgid", l.pid)
	case errors.Is(err, syscall.ESRCH):
	default:
		l.s.log.Warn("cannot signal the process group", "signal", s.String(), "pgid", l.pid, "err", err)
	}
	if l.exited {
		return
	}
	if pg, err := syscall.Getpgid(l.pid); err == nil && pg != l.pid {
		if err := syscall.Kill(l.pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
			l.s.log.Warn("cannot signal the main process", "signal", s.String(), "pid", l.pid, "err", err)
		}
	}
}

// groupAlive reports whether any process, zombies included, is still in the
// child's process group. Signal 0 checks without sending; the group id
// cannot be reused while the group has a member, zombie or not.
func (l *loop) groupAlive() bool {
	return !errors.Is(syscall.Kill(-l.pid, 0), syscall.ESRCH)
}
