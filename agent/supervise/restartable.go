package supervise

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
)

// Restartable is the service under `run` when a reload may restart it: a
// supervisor per run of the command, the next started when the reload asks
// (Restart) rather than when the service ends on its own. The container
// keeps running, so the pod keeps its IP and no CrashLoopBackOff counts.
// It is the steady state's service, the checks' PIDSource and Spawner, and
// the reload's signaller, always through the current supervisor.
type Restartable struct {
	newSup func() (*Supervisor, error)

	running     chan struct{} // closed when the first child has started
	runningOnce sync.Once
	done        chan struct{} // closed when Run returns

	mu         sync.Mutex
	cur        *Supervisor
	stopped    bool
	ended      bool // Run has returned: next is closed for good
	restarting bool
	restarts   int
	next       chan struct{} // closed when the next child runs (or Run ends)
}

// NewRestartable makes the first supervisor with newSup; the next ones are
// made the same way, one per restart.
func NewRestartable(newSup func() (*Supervisor, error)) (*Restartable, error) {
	s, err := newSup()
	if err != nil {
		return nil, err
	}
	return &Restartable{newSup: newSup, cur: s, running: make(chan struct{}), done: make(chan struct{}), next: make(chan struct{})}, nil
}

// Run runs the command, again after each Restart, and returns when it ends
// any other way, with its code.
func (r *Restartable) Run(ctx context.Context) (int, error) {
	defer close(r.done)
	defer func() {
		r.mu.Lock()
		r.ended = true
		close(r.next)
		r.mu.Unlock()
	}()
	for {
		r.mu.Lock()
		s := r.cur
		r.mu.Unlock()
		go func() {
			select {
			case <-s.Running():
				r.runningOnce.Do(func() { close(r.running) })
				r.mu.Lock()
				if !r.ended && r.cur == s && r.restarts > 0 {
					close(r.next)
					r.next = make(chan struct{})
				}
				r.mu.Unlock()
			case <-s.Done():
			}
		}()
		code, err := s.Run(ctx)
		r.mu.Lock()
		if !r.restarting || r.stopped {
			r.mu.Unlock()
			return code, err
		}
		r.restarting = false
		n, nerr := r.newSup()
		if nerr != nil {
			r.mu.Unlock()
			return code, errors.Join(err, nerr)
		}
		r.cur = n
		r.restarts++
		r.mu.Unlock()
	}
}

// Restart stops the running command (SIGTERM, its grace period, SIGKILL)
// and starts it again; it returns once the new one runs.
func (r *Restartable) Restart(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return errors.New("the service is stopping")
	}
	r.restarting = true
	s, next := r.cur, r.next
	r.mu.Unlock()
	s.Stop()
	select {
	case <-next:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return errors.New("the service ended instead of restarting")
	default:
		return nil
	}
}

// Restarts counts the restarts made so far.
func (r *Restartable) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

func (r *Restartable) current() *Supervisor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Stop stops the service for good.
func (r *Restartable) Stop() {
	r.mu.Lock()
	r.stopped = true
	s := r.cur
	r.mu.Unlock()
	s.Stop()
}

// Done is closed when Run has returned; Running when the first command has
// started. PID, Signal and Start are the current supervisor's.
func (r *Restartable) Done() <-chan struct{}    { return r.done }
func (r *Restartable) Running() <-chan struct{} { return r.running }
func (r *Restartable) PID() int                 { return r.current().PID() }

func (r *Restartable) Signal(ctx context.Context, sig syscall.Signal) error {
	return r.current().Signal(ctx, sig)
}

func (r *Restartable) Start(argv []string, attr *os.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	return r.current().Start(argv, attr)
}
