package agent

import (
	"context"
	"testing"
	"time"
)

// pidSeq answers PID with the next of its pids, one per call.
type pidSeq struct{ pids []int }

func (p *pidSeq) PID() int {
	pid := p.pids[0]
	if len(p.pids) > 1 {
		p.pids = p.pids[1:]
	}
	return pid
}

// watchProcess reports a change when the process found at the tick before
// is gone or another, not when one is found where there was none.
func TestWatchProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		pids []int
		want int
	}{
		{"found late, kept", []int{0, 0, 5, 5, 5}, 0},
		{"gone, then another", []int{5, 5, 0, 0, 7, 7}, 1},
		{"replaced between ticks", []int{5, 7, 7}, 1},
		{"replaced twice", []int{5, 0, 7, 9}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tick := make(chan time.Time)
			changes := make(chan struct{}, len(tc.pids))
			done := make(chan struct{})
			go func() {
				watchProcess(ctx, &pidSeq{pids: tc.pids}, tick, func() { changes <- struct{}{} })
				close(done)
			}()
			for range tc.pids {
				tick <- time.Time{}
			}
			cancel()
			<-done
			if got := len(changes); got != tc.want {
				t.Errorf("%d changes for pids %v, want %d", got, tc.pids, tc.want)
			}
		})
	}
}
