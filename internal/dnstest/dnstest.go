// Package dnstest runs a real miekg/dns server on loopback for unit tests of
// DNS behaviour (NXDOMAIN, SERVFAIL, truncation, EDNS0), with a handler the
// test controls and a log of the queries it received. Cluster DNS itself is
// tested against CoreDNS (internal/testenv).
package dnstest

import (
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Query is one query a test server received.
type Query struct {
	Net   string // "udp" or "tcp"
	Name  string
	Type  uint16
	EDNS0 int // the OPT record's UDP size; 0 when the query had none
}

// Server is a real miekg/dns server on 127.0.0.1, on the same port over UDP
// and TCP, answering with a handler the test controls.
type Server struct {
	Addr string
	// UDPLimit is the largest UDP answer the server sends (CoreDNS' bufsize
	// default); anything larger is truncated with TC set, as a real server does.
	UDPLimit int

	mu      sync.Mutex
	queries []Query
}

// Handler returns the reply to q, or nil to send nothing at all.
type Handler func(q *dns.Msg, network string) *dns.Msg

// Start serves h on 127.0.0.1, UDP and TCP on one port, until the test ends.
func Start(t testing.TB, h Handler) *Server {
	t.Helper()
	s := &Server{UDPLimit: 1232}
	var pc net.PacketConn
	var l net.Listener
	for try := 0; l == nil; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
			pc.Close()
			if try == 20 {
				t.Fatalf("no free port for UDP and TCP: %v", err)
			}
		}
	}
	s.Addr = pc.LocalAddr().String()
	serve := func(srv *dns.Server) {
		started, done := make(chan struct{}), make(chan error, 1)
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { done <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("DNS server: %v", err)
		}
		t.Cleanup(func() {
			if err := srv.Shutdown(); err != nil {
				t.Errorf("DNS server shutdown: %v", err)
			}
			<-done
		})
	}
	serve(&dns.Server{PacketConn: pc, Handler: s.handler("udp", h)})
	serve(&dns.Server{Listener: l, Handler: s.handler("tcp", h)})
	return s
}

func (s *Server) handler(network string, h Handler) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		rec := Query{Net: network}
		if len(q.Question) > 0 {
			rec.Name, rec.Type = q.Question[0].Name, q.Question[0].Qtype
		}
		opt := q.IsEdns0()
		if opt != nil {
			rec.EDNS0 = int(opt.UDPSize())
		}
		s.mu.Lock()
		s.queries = append(s.queries, rec)
		s.mu.Unlock()
		m := h(q, network)
		if m == nil {
			return
		}
		if network == "udp" {
			size := dns.MinMsgSize
			if opt != nil {
				size = min(int(opt.UDPSize()), s.UDPLimit)
				m.SetEdns0(uint16(s.UDPLimit), false)
			}
			m.Truncate(size)
		}
		// A failed write shows as the client's error; t.Fatal is not
		// allowed on the server's goroutine.
		_ = w.WriteMsg(m)
	})
}

// Log returns the queries received so far, oldest first.
func (s *Server) Log() []Query {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Query(nil), s.queries...)
}

// Reply is an answer to q with rcode and the records.
func Reply(q *dns.Msg, rcode int, rrs ...dns.RR) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(q, rcode)
	m.Answer = rrs
	return m
}

// RR parses one record in zone file syntax.
func RR(t testing.TB, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
