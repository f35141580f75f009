// Package bootstrap runs a service's one-time work (create its database,
// db_sync, keystone-manage bootstrap) once per version across its replicas,
// agreeing through the API server: a content-named Job that the first
// replica creates (create mode), Jobs that another tool creates (wait mode),
// or a Lease whose holder runs the command in its own pod (lease mode). A
// finished step is recorded in a ConfigMap that outlives the Job, so a pod
// that starts after the Job was deleted proceeds at once.
//
// Every API interaction is a watch or a single read or write: nothing polls.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// Labels and annotations on what the agent creates.
const (
	// LabelName marks every Job the agent creates with bootstrap.name.
	LabelName = "kolla.openstack.org/bootstrap"
	// LabelVersion and LabelPhase say which version and phase a Job runs.
	LabelVersion = "kolla.openstack.org/bootstrap-version"
	LabelPhase   = "kolla.openstack.org/bootstrap-phase"
	// LabelAttempt numbers a failed Job's replacements (retries).
	LabelAttempt = "kolla.openstack.org/bootstrap-attempt"
	// AnnotationCreatedBy names the pod that created a Job.
	AnnotationCreatedBy = "kolla.openstack.org/created-by"
	// ConditionBootstrapped is the pod condition the agent can patch.
	ConditionBootstrapped = "kolla.openstack.org/bootstrapped"
)

// The resources bootstrap reads and writes.
var (
	jobsGVR        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	configMapsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	statefulSetGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
)

// ErrFailed: the bootstrap failed (a Job failed past its retries, the
// command exited non-zero) and waiting longer will not help.
var ErrFailed = errors.New("bootstrap failed")

// ErrTimeout: the bootstrap did not finish within its timeout.
var ErrTimeout = errors.New("bootstrap timed out")

// Step is one unit of work for one version: the whole bootstrap, or one
// phase of an upgrade.
type Step struct {
	// Phase is "" for a bootstrap without phases.
	Phase string
	// Version is what the record is keyed by: the content hash or the
	// configured version.
	Version string
}

func (s Step) String() string {
	if s.Phase == "" {
		return "bootstrap " + s.Version
	}
	return s.Phase + " " + s.Version
}

// State of a step as the agent reports it.
type State string

const (
	Waiting State = "waiting"
	Running State = "running" // this replica runs the command (lease)
	Done    State = "done"
	Failed  State = "failed"
)

// Progress is one report of a step's state; Detail reads as a sentence
// ("waiting for job keystone-db-sync-3f9a1c2b7e (active 1)").
type Progress struct {
	Step   Step
	State  State
	Detail string
	// Event, when set, is a reason worth an Event on the pod
	// (BootstrapJobCreated, BootstrapFailed, ...).
	Event string
}

// Config is what a Coordinator needs.
type Config struct {
	Kube *discovery.Kube
	// Namespace is where the Jobs, the Lease and the record live.
	Namespace string
	// Name is bootstrap.name: the Jobs' prefix and label, the Lease's name,
	// the record's prefix.
	Name string
	// PodName identifies this replica (the Lease holder, the Job's creator).
	PodName string
	// Report receives every change of a step's state (nil: dropped).
	Report func(Progress)
	Logger *slog.Logger
	// Registerer takes the bootstrap metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Coordinator runs the steps of one bootstrap.
type Coordinator struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu sync.Mutex // report is called from the lease's goroutines too
}

// New returns a Coordinator; cfg.Kube is required.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Kube == nil {
		return nil, errors.New("bootstrap needs the Kubernetes API, but there is no service-account token and no --kubeconfig/KUBECONFIG")
	}
	if cfg.Report == nil {
		cfg.Report = func(Progress) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := newMetrics(cfg.Registerer)
	m.created.WithLabelValues(cfg.Name) // 0 until this replica creates one
	return &Coordinator{cfg: cfg, log: cfg.Logger, metrics: m}, nil
}

func (c *Coordinator) report(s Step, st State, event, format string, args ...any) {
	p := Progress{Step: s, State: st, Event: event, Detail: fmt.Sprintf(format, args...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.metrics.observe(c.cfg.Name, p)
	c.cfg.Report(p)
}

// backoff paces retries of writes after API errors.

// timedOut turns the end of ctx into ErrTimeout with the last detail, or
// passes a cancellation (the agent is stopping) through.
func timedOut(ctx context.Context, s Step, last string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %s", ErrTimeout, s, last)
	}
	return ctx.Err()
}
