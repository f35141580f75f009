package discovery

import (
	"slices"
	"testing"
	"time"
)

// Each wait is within its bound, and the bound doubles to the cap.
func TestAPIRetrySchedule(t *testing.T) {
	for range 1000 {
		r := newAPIRetry()
		bound := minRetry
		for step := range 20 {
			d := r.Step()
			if d < minRetry || d >= minRetry+bound {
				t.Fatalf("step %d: %v, want [%v, %v)", step, d, minRetry, minRetry+bound)
			}
			bound = min(2*bound, maxRetry)
		}
	}
}

// A fleet that lost its API server in the same instant: each agent retries
// on its own schedule until the server is back, and the moments of their
// first successful attempt are spread. The figures are those docs/scale.md
// quotes for 10,000 agents.
func TestAPIRetrySpreadsAFleet(t *testing.T) {
	const agents = 10000
	for _, c := range []struct {
		outage       time.Duration
		busiest      float64 // the largest share in any one second, at most
		last         time.Duration
		medianAtMost time.Duration
	}{
		{2 * time.Second, 0.75, maxRetry + minRetry, 2 * time.Second}, // a blip: bounds still small
		{5 * time.Second, 0.35, maxRetry + minRetry, 4 * time.Second},
		{10 * time.Second, 0.30, maxRetry + minRetry, 5 * time.Second},
		{60 * time.Second, 0.30, maxRetry + minRetry, 5 * time.Second},
	} {
		back := make([]time.Duration, agents) // after the server's return
		for i := range back {
			r := newAPIRetry()
			var at time.Duration
			for at < c.outage {
				at += r.Step()
			}
			back[i] = at - c.outage
		}
		slices.Sort(back)
		busiest, j := 0, 0
		for i := range back {
			for back[i]-back[j] >= time.Second {
				j++
			}
			busiest = max(busiest, i-j+1)
		}
		share := float64(busiest) / agents
		median, last := back[agents/2], back[agents-1]
		t.Logf("outage %v: busiest second %.0f%%, median %v, last %v after the return", c.outage, share*100, median.Round(time.Millisecond), last.Round(time.Millisecond))
		if share > c.busiest {
			t.Errorf("outage %v: %.0f%% of the fleet came back within one second, want at most %.0f%%", c.outage, share*100, c.busiest*100)
		}
		if last > c.last || median > c.medianAtMost {
			t.Errorf("outage %v: median %v, last %v after the return: want at most %v, %v", c.outage, median, last, c.medianAtMost, c.last)
		}
	}
}
