package bootstrap

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one Coordinator's, on the agent's registry.
type metrics struct {
	state   *prometheus.GaugeVec
	waited  *prometheus.GaugeVec
	created *prometheus.CounterVec
	started map[Step]time.Time // touched only from report's caller
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_bootstrap_state",
			Help: "1 for the state (waiting, running, done, failed) each bootstrap step is in, 0 for the others.",
		}, []string{"name", "phase", "state"}),
		waited: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_bootstrap_wait_seconds",
			Help: "How long the agent had waited for each bootstrap step at its last change of state (at the end: the whole wait).",
		}, []string{"name", "phase"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kolla_agent_bootstrap_jobs_created_total",
			Help: "Bootstrap Jobs this agent created (not counting those another replica created first).",
		}, []string{"name"}),
		started: map[Step]time.Time{},
	}
	if reg != nil {
		reg.MustRegister(m.state, m.waited, m.created)
	}
	return m
}

func (m *metrics) observe(name string, p Progress) {
	t0, ok := m.started[p.Step]
	if !ok {
		t0 = time.Now()
		m.started[p.Step] = t0
	}
	for _, s := range []State{Waiting, Running, Done, Failed} {
		v := 0.0
		if s == p.State {
			v = 1
		}
		m.state.WithLabelValues(name, p.Step.Phase, string(s)).Set(v)
	}
	m.waited.WithLabelValues(name, p.Step.Phase).Set(time.Since(t0).Seconds())
	if p.Event == "BootstrapJobCreated" {
		m.created.WithLabelValues(name).Inc()
	}
}
