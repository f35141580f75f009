package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

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
