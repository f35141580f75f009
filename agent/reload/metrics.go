package reload

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the reload passes by outcome and names the config the
// service runs with.
type Metrics struct {
	outcome *prometheus.CounterVec
	applied *prometheus.GaugeVec
}

// NewMetrics registers the reload's metrics on reg (nil: none), the
// service running with the config of hash running.
func NewMetrics(reg prometheus.Registerer, running string) (*Metrics, error) {
	m := &Metrics{
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kolla_agent_reload_total",
			Help: "Reload passes by outcome: unchanged (the render equals the running config), applied, rejected, rolled-back, failed, skipped (a config refused before).",
		}, []string{"outcome"}),
		applied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_config_info",
			Help: "Always 1; the label is the hash of the config the service runs with.",
		}, []string{"hash"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.outcome, m.applied} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	m.applied.WithLabelValues(running).Set(1)
	return m, nil
}

// Pass counts one pass's outcome; the service went from config before to
// after.
func (m *Metrics) Pass(outcome, before, after string) {
	m.outcome.WithLabelValues(outcome).Inc()
	if after != before {
		m.applied.Reset()
		m.applied.WithLabelValues(after).Set(1)
	}
}
