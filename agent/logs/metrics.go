package logs

import "github.com/prometheus/client_golang/prometheus"

// Metrics is an Observer that counts what the shipper delivers, and tells
// degraded why shipping fails ("" once it works again): the agent shows it
// in the probes' verbose answer (the service is not affected).
type Metrics struct {
	records, byteCount prometheus.Counter
	failures           prometheus.Counter
	skipped            *prometheus.CounterVec
	degraded           func(reason string)
}

// NewMetrics registers the shipper's metrics on reg.
func NewMetrics(reg prometheus.Registerer, degraded func(reason string)) *Metrics {
	m := &Metrics{
		degraded: degraded,
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kolla_agent_log_records_total",
			Help: "Log records the sink acknowledged (a traceback is one record).",
		}),
		byteCount: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kolla_agent_log_bytes_total",
			Help: "Bytes of log records the sink acknowledged.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kolla_agent_log_failures_total",
			Help: "Failed attempts to ship logs (the sink, reading a file, saving the offsets); the records stay in the files and are shipped again.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kolla_agent_log_files_skipped_total",
			Help: "Paths under a logs glob that were not regular files (a symlink, FIFO, socket or device) and were skipped unopened, by what they were.",
		}, []string{"type"}),
	}
	reg.MustRegister(m.records, m.byteCount, m.failures, m.skipped)
	return m
}

func (m *Metrics) Shipped(_ string, records, bytes int) {
	m.records.Add(float64(records))
	m.byteCount.Add(float64(bytes))
}

func (m *Metrics) Failed(err error) {
	m.failures.Inc()
	if m.degraded != nil {
		m.degraded("shipping fails: " + err.Error())
	}
}

func (m *Metrics) Skipped(_, what string) { m.skipped.WithLabelValues(what).Inc() }

func (m *Metrics) Recovered() {
	if m.degraded != nil {
		m.degraded("")
	}
}

var _ Observer = (*Metrics)(nil)
