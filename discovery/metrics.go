package discovery

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one gauge family per question an operator asks of a stuck pod:
// what is it waiting for, what is done, and for how long.
type metrics struct {
	waiting  *prometheus.GaugeVec
	resolved *prometheus.GaugeVec
	seconds  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"dependency", "type"}
	m := &metrics{
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_dependency_waiting",
			Help: "1 while the dependency is being waited for (not ready, not failed).",
		}, labels),
		resolved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_dependency_resolved",
			Help: "1 once the dependency is ready.",
		}, labels),
		seconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_dependency_wait_seconds",
			Help: "Seconds waited for the dependency: until it became ready, or so far.",
		}, labels),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.waiting, m.resolved, m.seconds} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) set(d Dependency, s State, waited time.Duration) {
	lv := []string{d.String(), string(d.Kind)}
	m.waiting.WithLabelValues(lv...).Set(b2f(s == Waiting || s == Unhealthy))
	m.resolved.WithLabelValues(lv...).Set(b2f(s == Ready))
	m.seconds.WithLabelValues(lv...).Set(waited.Seconds())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
