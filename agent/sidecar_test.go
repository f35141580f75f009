package agent

import (
	"context"
	"testing"
	"time"
)

// proc is a process as a Finder tells it apart: pid and start time.
type proc struct{ pid, start int }

// procSeq answers PID with the next of its processes, one per call, and
// counts restarts as a Finder does: a process found that is not the one
// found before.
type procSeq struct {
	procs    []proc
	last     proc
	restarts int
}

func (p *procSeq) PID() int {
	cur := p.procs[0]
	if len(p.procs) > 1 {
		p.procs = p.procs[1:]
	}
	if cur.pid != 0 {
		if p.last.pid != 0 && p.last != cur {
			p.restarts++
		}
		p.last = cur
	}
	return cur.pid
}

func (p *procSeq) Restarts() int { return p.restarts }

// watchProcess reports a change when the process found is gone (two ticks
// in a row), another, or found again after it went; not when one is found
// where there was none, nor for one tick without it (a pid file being
// rewritten).
func TestWatchProcess(t *testing.T) {
	p := func(pids ...int) []proc {
		var ps []proc
		for _, pid := range pids {
			ps = append(ps, proc{pid, 1})
		}
		return ps
	}
	for _, tc := range []struct {
		name  string
		procs []proc
		want  int
	}{
		{"never found", p(0, 0, 0), 0},
		{"found late, kept", p(0, 0, 5, 5, 5), 0},
		{"none for one tick (a pid file rewritten)", p(5, 0, 5, 5), 0},
		{"gone for good", p(5, 0, 0, 0, 0), 1},
		{"gone, then another", p(5, 5, 0, 0, 7, 7), 2},
		{"gone, then the same pid again", p(5, 0, 0, 5), 2},
		{"none for one tick, then another", p(5, 0, 7, 7), 1},
		{"replaced between ticks", p(5, 7, 7), 1},
		{"replaced twice", p(5, 0, 7, 9), 2},
		{"its pid reused by another", []proc{{5, 1}, {5, 2}, {5, 2}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tick := make(chan time.Time)
			changes := make(chan struct{}, len(tc.procs))
			done := make(chan struct{})
			go func() {
				watchProcess(ctx, &procSeq{procs: tc.procs}, tick, func() { changes <- struct{}{} })
				close(done)
			}()
			for range tc.procs {
				tick <- time.Time{}
			}
			cancel()
			<-done
			if got := len(changes); got != tc.want {
				t.Errorf("%d changes for %v, want %d", got, tc.procs, tc.want)
			}
		})
	}
}

// ticks answers PID and Restarts per tick as given: the count may move
// between a tick's two reads (the checks share the Finder and find the
// new process in between).
type ticks struct{ pids, counts []int }

func (k *ticks) PID() int {
	pid := k.pids[0]
	k.pids = k.pids[1:]
	return pid
}

func (k *ticks) Restarts() int {
	n := k.counts[0]
	k.counts = k.counts[1:]
	return n
}

// The new process counted by another's PID call at the tick without one:
// still a change when it is found (the count was taken as the old one's).
func TestWatchProcessCountedBetweenReads(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &ticks{pids: []int{5, 0, 7, 7}, counts: []int{0, 0, 1, 1, 1}} // the first count is read before the ticks
	tick := make(chan time.Time)
	changes := 0
	done := make(chan struct{})
	go func() {
		watchProcess(ctx, k, tick, func() { changes++ })
		close(done)
	}()
	for range 4 {
		tick <- time.Time{}
	}
	cancel()
	<-done
	if changes != 1 {
		t.Errorf("%d changes, want 1 (the new process)", changes)
	}
}
