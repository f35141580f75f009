package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// agentMetrics are the agent's own: what it is, and how its side duties and
// the service fare. Each duty package registers its own on the same registry.
type agentMetrics struct {
	reg          *prometheus.Registry
	dutyFailures *prometheus.CounterVec
	exitCode     prometheus.Gauge
}

// restarts exports how often the service's process was replaced (sidecar
// mode: the finder saw a new pid).
func (m *agentMetrics) restarts(count func() int) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "kolla_agent_service_restarts_total",
		Help: "Times the service's process was replaced by a new one since the agent started.",
	}, func() float64 { return float64(count()) }))
}

func newAgentMetrics(reg *prometheus.Registry, version string) *agentMetrics {
	m := &agentMetrics{
		reg: reg,
		dutyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kolla_agent_duty_failures_total",
			Help: "Failures of the agent's side duties (probe server, log shipping, reload); the service runs on.",
		}, []string{"duty"}),
		exitCode: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kolla_agent_service_last_exit_code",
			Help: "Exit code of the service's last run (128+N for signal N); -1 while it has not exited.",
		}),
	}
	m.exitCode.Set(-1)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kolla_agent_build_info",
		Help: "Always 1; the labels say which agent this is.",
	}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	reg.MustRegister(m.dutyFailures, m.exitCode, info)
	return m
}

// serveMetrics serves the registry's metrics on addr until the returned stop
// is called, so that a long wait in an init container can be scraped. The
// listener is opened before it returns: a bad address is a config error now,
// not a log line later.
func (a *Agent) serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, configErr("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Warn("metrics server stopped", "error", err.Error())
		}
	}()
	a.log.Info("serving metrics", "address", l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}
