package logs

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
)

// File to the real Fluent forward server through the shipper: 20,000
// lines written while the server is SIGKILLed and restarted and the
// shipper is stopped and started again (its offsets from the state dir):
// every line arrives, in order within the file, with the record fields;
// duplicates only from batches in flight at a failure.
func TestShipperToRealServer(t *testing.T) {
	srv := forwardserver.Start(t, forwardserver.Options{})
	dir := filepath.Join(t.TempDir(), "glance")
	mkdir(t, dir)
	log := filepath.Join(dir, "glance-api.log")
	w := writer(t, log)
	f, err := NewForward(ForwardConfig{Address: srv.Addr(), AckTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &ForwardSink{F: f, Container: "glance-api"},
		Fields:   map[string]string{"pod": "glance-api-0", "namespace": "openstack"},
		StateDir: filepath.Join(t.TempDir(), "state"), Idle: 50 * time.Millisecond, Rescan: time.Second, BatchBytes: 64 << 10}
	stop := runShipper(t, cfg)
	const total = 20_000
	for i := 0; i < total; i++ {
		w.WriteString(lines(i, i+1))
		switch i {
		case 5_000:
			srv.Kill()
		case 7_000:
			srv.Restart(t)
		case 12_000:
			stop()
		case 14_000:
			stop = runShipper(t, cfg)
		}
		if i%500 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	seen := map[int]int{}
	var recs []forwardserver.Record
	for len(seen) < total && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if recs, err = srv.Records(); err != nil {
			t.Fatal(err)
		}
		clear(seen)
		for _, r := range recs {
			msg, _ := r.Fields["message"].([]byte)
			for _, l := range strings.Split(string(msg), "\n") {
				fs := strings.Fields(l)
				if len(fs) > 6 {
					if n, err := strconv.Atoi(fs[6]); err == nil {
						seen[n]++
					}
				}
			}
		}
	}
	stop()
	if len(seen) != total {
		t.Fatalf("%d of %d lines arrived", len(seen), total)
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	r := recs[0]
	if r.Tag != "kolla.glance.glance-api" || r.Fields["pod"] != "glance-api-0" || r.Fields["namespace"] != "openstack" || r.Fields["container"] != "glance-api" || r.Fields["file"] != log || r.Fields["id"] == nil || r.Fields["offset"] == nil {
		t.Errorf("record %+v", r)
	}
	t.Logf("%d lines, %d records, %d duplicate lines (batches of 64 KiB in flight at the failures)", total, len(recs), dups)
	if dups > 4*2000 {
		t.Errorf("%d duplicates: more than the batches in flight", dups)
	}
}
