package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/kolla-agent/kolla-agent/retry"
)

// Config says what to wait for and with which means.
type Config struct {
	Dependencies []Dependency
	// Timeout bounds the whole wait. Zero means no overall bound (each
	// dependency's own Timeout still applies); callers should always set one.
	Timeout time.Duration
	// Namespace is the agent's own namespace: the default for API objects.
	Namespace string
	// PodName and NodeName identify the agent's pod; NodeName is looked up from
	// the pod when empty and a dependency needs it.
	PodName, NodeName string

	// Public overrides, per "namespace/name" of a Service, where users
	// outside the cluster reach it (an operator's floating IP, the VIP in
	// front of the nodes of a NodePort Service): the fields set win over the
	// Service's annotations and over what the cluster reports.
	Public map[string]Exposure

	// DNS resolves dns: dependencies; required when there are any.
	DNS *Resolver
	// Kube reaches the API server; required when a dependency needs it.
	Kube *Kube

	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are not registered
	Clock      clock.WithTicker      // nil: the real clock
}

// Waiter waits for a set of dependencies. Create it with New; run it once.
type Waiter struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.WithTicker
	metrics *metrics
	node    nodeNameCache

	mu    sync.Mutex
	state []Result
}

// Result is the last known state of one dependency.
type Result struct {
	Dependency Dependency
	Observation
	// Since is when the dependency entered its current state.
	Since time.Time
	// Waited is how long it took to become ready, or how long it has been
	// waited for so far.
	Waited time.Duration
}

// New validates cfg: every dependency can be checked with the means given.
func New(cfg Config) (*Waiter, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("discovery: negative timeout %v", cfg.Timeout)
	}
	for _, d := range cfg.Dependencies {
		switch {
		case d.Timeout < 0:
			return nil, fmt.Errorf("discovery: %s: negative timeout %v", d, d.Timeout)
		case d.Kind == KindDNS && cfg.DNS == nil:
			return nil, fmt.Errorf("discovery: %s: no DNS resolver configured", d)
		case d.Kind.NeedsAPI() && cfg.Kube == nil:
			return nil, fmt.Errorf("discovery: %s: needs the Kubernetes API, but there is no service-account token and no --kubeconfig", d)
		case d.NeedsPod() && cfg.PodName == "" && (d.Kind == KindContainer || cfg.NodeName == ""):
			return nil, fmt.Errorf("discovery: %s: needs the agent's own pod: set POD_NAME (downward API)", d)
		case d.Kind.NeedsAPI() && d.Namespace == "" && cfg.Namespace == "":
			return nil, fmt.Errorf("discovery: %s: no namespace given and the agent's own is unknown", d)
		}
	}
	w := &Waiter{
		cfg:   cfg,
		log:   cfg.Logger,
		clock: cfg.Clock,
		state: make([]Result, len(cfg.Dependencies)),
	}
	w.node = nodeNameCache{name: cfg.NodeName}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	w.metrics = m
	now := w.clock.Now()
	for i, d := range cfg.Dependencies {
		w.state[i] = Result{Dependency: d, Observation: waiting("not checked yet"), Since: now}
		w.metrics.set(d, Waiting, 0)
	}
	return w, nil
}

// ErrFailed wraps the error of a dependency that can never be satisfied.
var ErrFailed = errors.New("dependency failed")

// ErrTimeout wraps the error of a wait that ran out of time.
var ErrTimeout = errors.New("timed out")

// Run waits until every dependency is ready, one fails, or a timeout expires.
// The error names each dependency that is not ready and its last observed
// state; errors.Is tells ErrFailed from ErrTimeout.
func (w *Waiter) Run(parent context.Context) error {
	start := w.clock.Now()
	ctx := parent
	if w.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.cfg.Timeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, turn := withTurn(ctx)

	shares := w.share(ctx)
	arrivals := w.arrivals(turn, shares)
	var wg sync.WaitGroup
	for i := range w.cfg.Dependencies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := withArrival(ctx, arrivals[i])
			defer turn.arrived(arrivals[i]) // if it ended without asking
			if err := w.waitOne(ctx, i, start, shares[i]); err != nil && errors.Is(err, ErrFailed) {
				cancel(err) // a failed dependency ends the whole wait at once
			}
		}()
	}
	wg.Wait()

	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrFailed) {
		return cause
	}
	var pending []string
	for _, r := range w.Results() {
		if r.State != Ready {
			pending = append(pending, fmt.Sprintf("%s (%s: %s)", r.Dependency, r.State, r.Detail))
		}
	}
	if len(pending) == 0 {
		return nil
	}
	if parent.Err() != nil {
		return fmt.Errorf("wait interrupted; not ready: %s", strings.Join(pending, "; "))
	}
	return fmt.Errorf("%w after %v; not ready: %s", ErrTimeout, w.clock.Since(start).Round(time.Millisecond), strings.Join(pending, "; "))
}

// share plans the wait's shared watches: the Services of a namespace are
// one EndpointSlice watch, and the Jobs it names there, two or more, one
// watch of its Jobs. It returns, by dependency, the one it joins.
func (w *Waiter) share(ctx context.Context) []*shared {
	out := make([]*shared, len(w.cfg.Dependencies))
	type key struct {
		kind Kind
		ns   string
	}
	named := map[key]int{}
	for _, d := range w.cfg.Dependencies {
		if d.Kind == KindJob && d.Labels == nil {
			named[key{KindJob, w.namespace(d)}]++
		}
	}
	shares := map[key]*shared{}
	for i, d := range w.cfg.Dependencies {
		k := key{d.Kind, w.namespace(d)}
		switch {
		case d.Kind == KindService:
			if shares[k] == nil {
				shares[k] = newShared(ctx, w.cfg.Kube.in(endpointSlicesGVR, k.ns), endpointSlicesKind, w.sleep)
			}
		case d.Kind == KindJob && d.Labels == nil && named[k] > 1:
			if shares[k] == nil {
				var sh *shared
				sh = newShared(ctx, w.cfg.Kube.jobs(k.ns, func(name string) bool { return sh.has(name) }), jobsKind, w.sleep)
				shares[k] = sh
			}
		default:
			continue
		}
		out[i] = shares[k]
		out[i].plan(d.Name)
	}
	return out
}

// arrivals returns, by dependency, the arrival the wait's Job lookups wait
// for at the start (turn.go): one for each lookup of a kind that goes
// straight to its LIST and WATCH, Services, pods, containers, DaemonSets.
// A shared watch makes its own (nil for its members); a custom resource,
// whose CRD may be waited for first, and an exposure, whose watches take
// no turn, make none.
func (w *Waiter) arrivals(turn *watchTurn, shares []*shared) []*arrival {
	out := make([]*arrival, len(w.cfg.Dependencies))
	for i, d := range w.cfg.Dependencies {
		switch d.Kind {
		case KindService, KindPod, KindContainer, KindDaemonSet:
		default:
			continue
		}
		if sh := shares[i]; sh != nil {
			if sh.lw.arrival == nil {
				sh.lw.arrival = turn.expect()
			}
			continue
		}
		out[i] = turn.expect()
	}
	return out
}

func (w *Waiter) waitOne(ctx context.Context, i int, start time.Time, sh *shared) error {
	d := w.cfg.Dependencies[i]
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	report := func(o Observation) { w.observe(i, o, start) }
	err := w.check(ctx, d, report, sh)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrFailed):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		// A check that gave up for a reason of its own is a failure.
		report(failed("%v", err))
		return fmt.Errorf("%w: %s: %v", ErrFailed, d, err)
	}
}

// observe records an observation, logging and counting only changes of state
// or detail, never repeats: a dependency that stays NXDOMAIN for a minute is
// one line, not sixty.
func (w *Waiter) observe(i int, o Observation, start time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := &w.state[i]
	now := w.clock.Now()
	if r.State == Ready || r.State == Failed {
		return // final; later reports from a winding-down check are moot
	}
	changed := r.Observation != o
	if r.State != o.State {
		r.Since = now
	}
	r.Observation = o
	r.Waited = now.Sub(start)
	w.metrics.set(r.Dependency, o.State, r.Waited)
	if !changed {
		return
	}
	attrs := []any{"dependency", r.Dependency.String(), "state", string(o.State), "detail", o.Detail}
	switch o.State {
	case Ready:
		w.log.Info("dependency ready", append(attrs, "waited", r.Waited.Round(time.Millisecond).String())...)
	case Failed:
		w.log.Error("dependency failed", attrs...)
	case Unhealthy:
		w.log.Warn("dependency check unhealthy", attrs...)
	default:
		w.log.Info("waiting for dependency", attrs...)
	}
}

// Results returns the last known state of every dependency, in config order.
func (w *Waiter) Results() []Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Result(nil), w.state...)
}

// check waits for one dependency, reporting what it sees, until it is ready
// (nil), can never be (an error wrapping ErrFailed) or ctx ends. sh is the
// shared watch d joins, if any (share).
func (w *Waiter) check(ctx context.Context, d Dependency, report func(Observation), sh *shared) error {
	switch d.Kind {
	case KindDNS, KindTCP, KindFile, KindSocket:
		return w.poll(ctx, d, report, func(ctx context.Context) Observation { return w.Look(ctx, d) })
	case KindHTTP:
		return w.waitHTTP(ctx, d, report)
	case KindService:
		return w.waitService(ctx, d, report, sh)
	case KindJob:
		return w.waitJobs(ctx, d, report, sh)
	case KindDaemonSet:
		return w.waitDaemonSet(ctx, d, report)
	case KindPod:
		return w.waitPods(ctx, d, report)
	case KindContainer:
		return w.waitContainer(ctx, d, report)
	case KindResource:
		return w.waitResource(ctx, d, report)
	case KindExposed:
		return w.waitExposed(ctx, d, report)
	}
	return fmt.Errorf("%w: %s: unknown kind", ErrFailed, d)
}

// poll looks at a dependency until it is ready or failed, backing off between
// looks. For dependencies with nothing to watch: DNS, TCP, files, sockets.
func (w *Waiter) poll(ctx context.Context, d Dependency, report func(Observation), look func(context.Context) Observation) error {
	b := retry.Lookup()
	for {
		o := look(ctx)
		if ctx.Err() != nil {
			return ctx.Err() // the look was cut short: its observation means nothing
		}
		if done, err := settle(ctx, d, o, report); done {
			return err
		}
		if !w.sleep(ctx, b.Step()) {
			return ctx.Err()
		}
	}
}

// settle reports an observation and says whether the wait for d is over:
// ready (nil) or failed (an error wrapping ErrFailed). A followed dependency
// is never over: its state is reported and the watch goes on.
func settle(ctx context.Context, d Dependency, o Observation, report func(Observation)) (bool, error) {
	report(o)
	if following(ctx) {
		return false, nil
	}
	switch o.State {
	case Ready:
		return true, nil
	case Failed:
		return true, fmt.Errorf("%w: %s: %s", ErrFailed, d, o.Detail)
	}
	return false, nil
}

// sleep waits for d on the waiter's clock; false if ctx ended first.
func (w *Waiter) sleep(ctx context.Context, d time.Duration) bool {
	return retry.Sleep(ctx, w.clock, d)
}
