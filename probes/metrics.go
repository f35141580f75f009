package probes

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics: per check its judged state, the duration of its last look and
// its failed looks; per probe whether it passes now (computed at scrape
// from the same cached state the handlers read).
type metrics struct {
	passing  *prometheus.GaugeVec
	duration *prometheus.GaugeVec
	failures *prometheus.CounterVec
}

type probeCollector struct {
	h    *Health
	desc *prometheus.Desc
}

func (c probeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c probeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range []Probe{Startup, Readiness, Liveness} {
		rep, _ := c.h.Evaluate(p, nil, "")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, b2f(rep.Pass), p.String())
	}
}

func newMetrics(reg prometheus.Registerer, h *Health) (*metrics, error) {
	m := &metrics{
		passing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_check_passing",
			Help: "1 while the check is judged passing (after thresholds), 0 while failing or not judged yet.",
		}, []string{"check"}),
		duration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kolla_agent_check_duration_seconds",
			Help: "How long the check's last look took.",
		}, []string{"check"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kolla_agent_check_failures_total",
			Help: "Looks of the check that failed (before thresholds).",
		}, []string{"check"}),
	}
	for _, c := range h.checks {
		m.passing.WithLabelValues(c.spec.Name).Set(0)
		m.duration.WithLabelValues(c.spec.Name).Set(0)
		m.failures.WithLabelValues(c.spec.Name).Add(0)
	}
	if reg == nil {
		return m, nil
	}
	pc := probeCollector{h: h, desc: prometheus.NewDesc("kolla_agent_probe_passing",
		"1 while the probe (startup, readiness, liveness) would answer 200.", []string{"probe"}, nil)}
	for _, c := range []prometheus.Collector{m.passing, m.duration, m.failures, pc} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(name string, r *result) {
	m.passing.WithLabelValues(name).Set(b2f(r.state == passing))
	m.duration.WithLabelValues(name).Set(r.took.Seconds())
	if !r.ok {
		m.failures.WithLabelValues(name).Inc()
	}
}

// reset shows a check back to pending (not a failed look).
func (m *metrics) reset(name string) { m.passing.WithLabelValues(name).Set(0) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
