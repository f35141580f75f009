package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"k8s.io/client-go/rest"

	"github.com/kolla-agent/kolla-agent/agent/logs"
	"github.com/kolla-agent/kolla-agent/agent/reload"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/probes"
)

// Every metric the agent can export (its own, the probes', discovery's),
// registered as the agent registers them: lint-clean by Prometheus' rules,
// and listed in the README so an operator can find what it means.
func TestMetricNamesLintedAndDocumented(t *testing.T) {
	a := New(Options{Version: "test"})
	a.metrics.restarts(func() int { return 0 })
	logs.NewMetrics(a.registry, nil)
	if _, err := reload.NewMetrics(a.registry, "0123456789"); err != nil {
		t.Fatal(err)
	}
	if _, err := probes.New(probes.Config{
		Checks: []probes.Spec{{
			Name: "heartbeat", Probes: []probes.Probe{probes.Readiness}, Period: time.Second, Timeout: time.Second,
			Checker: probes.NewFile("/nonexistent", time.Minute),
		}},
		Registerer: a.registry,
	}); err != nil {
		t.Fatal(err)
	}
	d, err := discovery.Parse("file:/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.New(discovery.Config{Dependencies: []discovery.Dependency{d}, Registerer: a.registry}); err != nil {
		t.Fatal(err)
	}
	a.metrics.dutyFailures.WithLabelValues("probe-server").Add(0)
	// The bootstrap's: a wait-mode step against an API that is not there
	// reports waiting, then failed.
	kube, err := discovery.NewKube(&rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	coord, err := bootstrap.New(bootstrap.Config{Kube: kube, Namespace: "ns", Name: "keystone-db-sync", Registerer: a.registry})
	if err != nil {
		t.Fatal(err)
	}
	// A failed step holds until the timeout: a short one.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := coord.Wait(ctx, bootstrap.Step{Version: "0123456789"}, "job x", func(context.Context) error { return errors.New("no") }); err == nil {
		t.Fatal("a failing wait succeeded")
	}
	mfs, err := a.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) < 10 {
		t.Errorf("only %d metric families gathered; the test no longer sees them all", len(mfs))
	}
	for _, mf := range mfs {
		// The standard Go runtime and process series, listed as groups.
		if std, _, ok := strings.Cut(mf.GetName(), "_"); ok && (std == "go" || std == "process") {
			if !strings.Contains(string(readme), "`"+std+"_*`") {
				t.Errorf("metric %s: README.md does not list the %s_* series", mf.GetName(), std)
			}
			continue
		}
		if !strings.HasPrefix(mf.GetName(), "kolla_agent_") {
			t.Errorf("metric %s lacks the kolla_agent_ prefix", mf.GetName())
		}
		if !strings.Contains(string(readme), "`"+mf.GetName()+"`") {
			t.Errorf("metric %s is not listed in README.md", mf.GetName())
		}
	}
}
