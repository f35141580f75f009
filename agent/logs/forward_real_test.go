package logs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
)

// realCounts counts the arrivals of each message in the server's records.
func realCounts(t *testing.T, recs []forwardserver.Record) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, r := range recs {
		if r.Mode != "PackedForward" || !r.EventTime || len(r.Chunk) != 24 {
			t.Errorf("record %+v: want PackedForward with an EventTime and a chunk", r)
		}
		s, _ := r.Fields["message"].(string)
		m[s]++
	}
	return m
}

// TestForwardRealServer runs the client against @fluent-org/logger's
// FluentServer (internal/forwardserver).
func TestForwardRealServer(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		s := forwardserver.Start(t, forwardserver.Options{})
		f := newForward(t, ForwardConfig{Address: s.Addr(), AckTimeout: 5 * time.Second})
		when := time.Unix(1700000000, 987654321)
		err := f.Send(context.Background(), "kolla.keystone", []Entry{{Time: when, Fields: []Field{
			{"message", "hello"}, {"raw", []byte{0xff, 0x00}}, {"offset", uint64(1 << 40)}, {"neg", -3},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		// The server writes a message's entries before its ack.
		recs, err := s.Records()
		if err != nil || len(recs) != 1 {
			t.Fatalf("records %+v, %v", recs, err)
		}
		r := recs[0]
		if r.Tag != "kolla.keystone" || !r.Time.Equal(when) || r.Fields["message"] != "hello" ||
			string(r.Fields["raw"].([]byte)) != "\xff\x00" || r.Fields["offset"] != float64(1<<40) || r.Fields["neg"] != float64(-3) {
			t.Errorf("record %+v", r)
		}

		sent := make([][]Entry, 20)
		var wg sync.WaitGroup
		for i := range sent {
			sent[i] = testEntries(fmt.Sprint("p", i), 25)
			wg.Go(func() {
				if err := f.Send(context.Background(), "kolla.nova", sent[i]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		recs, err = s.Records()
		if err != nil {
			t.Fatal(err)
		}
		counts := realCounts(t, recs)
		delete(counts, "hello")
		if dups := checkDelivered(t, counts, sent); dups != 0 {
			t.Errorf("%d duplicates", dups)
		}
	})

	t.Run("shared key", func(t *testing.T) {
		s := forwardserver.Start(t, forwardserver.Options{SharedKey: "s3cret"})
		f := newForward(t, ForwardConfig{Address: s.Addr(), SharedKey: "s3cret", AckTimeout: 5 * time.Second})
		es := testEntries("authenticated", 3)
		if err := f.Send(context.Background(), "t", es); err != nil {
			t.Fatal(err)
		}
		bad := newForward(t, ForwardConfig{Address: s.Addr(), SharedKey: "wrong", AckTimeout: 5 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := bad.Send(ctx, "t", testEntries("rejected", 1))
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "shared key mismatch") || ctx.Err() != nil {
			t.Fatalf("Send with the wrong key: %v; want ErrAuth with the server's reason", err)
		}
		t.Log(err)
		recs, err := s.Records()
		if err != nil {
			t.Fatal(err)
		}
		checkDelivered(t, realCounts(t, recs), [][]Entry{es})
	})

	t.Run("TLS", func(t *testing.T) {
		for _, key := range []string{"", "tls key"} {
			s := forwardserver.Start(t, forwardserver.Options{TLS: true, SharedKey: key})
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				t.Fatalf("no certificate in %s", s.CAFile)
			}
			f := newForward(t, ForwardConfig{Address: s.Addr(), SharedKey: key, TLS: &tls.Config{RootCAs: pool}, AckTimeout: 5 * time.Second})
			es := testEntries("tls"+key, 10)
			if err := f.Send(context.Background(), "t", es); err != nil {
				t.Fatal(err)
			}
			recs, err := s.Records()
			if err != nil {
				t.Fatal(err)
			}
			checkDelivered(t, realCounts(t, recs), [][]Entry{es})

			// An unknown CA fails the TLS handshake: Send keeps trying
			// until its context ends and says why. The context ends at
			// the first failure, however long a loaded machine makes
			// the handshake (a deadline could cut the first one short).
			refused := func(tc *tls.Config, what string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				f := newForward(t, ForwardConfig{Address: s.Addr(), SharedKey: key, TLS: tc, OnHealth: func(err error) {
					if err != nil {
						cancel()
					}
				}})
				return f.Send(ctx, "t", testEntries(what, 1))
			}
			err = refused(&tls.Config{}, "untrusted")
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("Send with an untrusted certificate: %v", err)
			}

			// The right CA but another name: refused too.
			err = refused(&tls.Config{RootCAs: pool, ServerName: "fluentd.wrong.example"}, "wrong name")
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "fluentd.wrong.example") {
				t.Errorf("Send to a certificate of another name: %v", err)
			}
		}
	})

	// The server is SIGKILLed while Sends stream, and started again on the
	// same port: nothing is lost, and the duplicates are bounded by the
	// chunks in flight when it died.
	t.Run("killed and restarted", func(t *testing.T) {
		s := forwardserver.Start(t, forwardserver.Options{})
		const inflight, per = 4, 20
		f := newForward(t, ForwardConfig{Address: s.Addr(), MaxInFlight: inflight, AckTimeout: 5 * time.Second})
		sent := make([][]Entry, 200)
		for i := range sent {
			sent[i] = testEntries(fmt.Sprint("k", i), per)
		}
		var wg sync.WaitGroup
		for g := range inflight {
			wg.Go(func() {
				for i := g; i < len(sent); i += inflight {
					if err := f.Send(context.Background(), "t", sent[i]); err != nil {
						t.Error(err)
					}
				}
			})
		}
		s.WaitRecords(t, 800, 10*time.Second)
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		killed, err := s.Records()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		s.Restart(t)
		wg.Wait()
		recs, err := s.Records()
		if err != nil {
			t.Fatal(err)
		}
		dups := checkDelivered(t, realCounts(t, recs), sent)
		t.Logf("%d entries when killed, %d records in all, %d duplicates", len(killed), len(recs), dups)
		if dups > inflight*per {
			t.Errorf("%d duplicates, more than the %d entries in flight", dups, inflight*per)
		}
	})
}
