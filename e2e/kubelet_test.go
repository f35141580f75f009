package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kubeletMetric sums the kubelet's own probe counter name over the series whose
// labels contain every one of labels (`key="value"`), from its /metrics/probes:
// what the kubelet itself did, not what a test thinks it did.
func kubeletMetric(name string, labels ...string) (float64, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The kubelet's self-signed serving certificate; the node's bridge only.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test node
		Proxy:           nil,
	}}
	resp, err := c.Get(fmt.Sprintf("https://%s:10250/metrics/probes", testenv.NodeIP))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("kubelet /metrics: %s", resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		series, value, ok := strings.Cut(l, "} ")
		if !ok {
			continue
		}
		match := true
		for _, want := range labels {
			match = match && strings.Contains(series, want)
		}
		if match {
			v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
			if err != nil {
				return 0, fmt.Errorf("kubelet /metrics: %q", l)
			}
			sum += v
		}
	}
	return sum, sc.Err()
}

// waitProbes waits until the kubelet has run at least n successful probes
// of the kind (Liveness, Readiness, Startup) on the pod, and returns how
// many it counted.
func waitProbes(t *testing.T, ns, pod, kind string, n int) float64 {
	t.Helper()
	var got float64
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		v, err := kubeletMetric("prober_probe_total", `probe_type="`+kind+`"`, `result="successful"`, `namespace="`+ns+`"`, `pod="`+pod+`"`)
		if err != nil {
			t.Logf("kubelet metrics: %v", err)
			return false, nil
		}
		got = v
		return v >= float64(n), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: the kubelet counted %v successful %s probes, want %d", ns, pod, got, kind, n)
	}
	return got
}
