package logs

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
)

// Each record is one entry with its keys, the fields after them (a field
// wins over the sink's own Pod); the buffers a Send leaves are reused by
// the next, also when Sends run at once, without one's entries in
// another's.
func TestForwardSink(t *testing.T) {
	r := newReceiver(t, nil)
	s := &ForwardSink{F: newForward(t, ForwardConfig{Address: r.addr()}), Pod: "ignored", Namespace: "openstack"}
	recs := []Record{
		{Data: []byte("a \xff line"), File: Position{Path: "/var/log/kolla/keystone/keystone.log", Dev: 1, Ino: 2, Head: "ab", First: "ab"}, End: 10},
		{Data: []byte("piece"), File: Position{Path: "/var/log/kolla/keystone/keystone.log", Dev: 1, Ino: 3, Head: "cd", First: "cd"}, End: 5, Partial: true},
	}
	fields := map[string]string{"pod": "keystone-api-0", "zone": "z1"}
	if err := s.Send(context.Background(), "kolla.keystone.keystone", fields, recs); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"message": []byte("a \xff line"), "file": "/var/log/kolla/keystone/keystone.log", "offset": int64(10), "id": "1:2:ab", "pod": "keystone-api-0", "namespace": "openstack", "zone": "z1"},
		{"message": []byte("piece"), "file": "/var/log/kolla/keystone/keystone.log", "offset": int64(5), "id": "1:3:cd", "partial": true, "pod": "keystone-api-0", "namespace": "openstack", "zone": "z1"},
	}
	r.mu.Lock()
	got := append([]recvEntry(nil), r.recs...)
	r.mu.Unlock()
	if len(got) != 2 || got[0].tag != "kolla.keystone.keystone" || !reflect.DeepEqual(got[0].fields, want[0]) || !reflect.DeepEqual(got[1].fields, want[1]) {
		t.Fatalf("entries %+v", got)
	}

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				rs := make([]Record, 1+i%5)
				for j := range rs {
					rs[j] = Record{Data: fmt.Appendf(nil, "g%d-s%d-r%d", g, i, j), File: Position{Path: "/x.log"}, End: int64(j)}
				}
				if err := s.Send(context.Background(), "t", nil, rs); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range r.recs[2:] {
		m, _ := e.fields["message"].([]byte)
		if seen[string(m)] || e.fields["zone"] != nil || e.fields["pod"] != "ignored" {
			t.Fatalf("entry %+v", e.fields)
		}
		seen[string(m)] = true
	}
	if len(seen) != 4*(20/5)*(1+2+3+4+5) {
		t.Errorf("%d entries", len(seen))
	}
	if len(s.free) == 0 {
		t.Error("no buffer kept for the next Send")
	}
}
