package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kolla-agent/kolla-agent/internal/dnstest"
)

// The shared loopback DNS server, under this file's names.
type (
	testDNS    = dnstest.Server
	dnsQuery   = dnstest.Query
	dnsHandler = dnstest.Handler
)

func startDNS(t *testing.T, h dnsHandler) *testDNS { return dnstest.Start(t, h) }

var (
	reply = dnstest.Reply
	rr    = dnstest.RR
)

// byType answers from a table of "NAME TYPE" -> records; a name in the table
// without the type asked is NODATA, a name not in it NXDOMAIN.
func byType(t *testing.T, zone map[string][]string) dnsHandler {
	return func(q *dns.Msg, _ string) *dns.Msg {
		name := strings.ToLower(q.Question[0].Name)
		typ := dns.TypeToString[q.Question[0].Qtype]
		found := false
		var rrs []dns.RR
		for k, v := range zone {
			n, ty, _ := strings.Cut(k, " ")
			if n != name {
				continue
			}
			found = true
			if ty == typ {
				for _, s := range v {
					rrs = append(rrs, rr(t, s))
				}
			}
		}
		if !found {
			return reply(q, dns.RcodeNameError)
		}
		return reply(q, dns.RcodeSuccess, rrs...)
	}
}

func newTestResolver(t *testing.T, timeout time.Duration, servers ...string) *Resolver {
	t.Helper()
	r, err := NewResolver(DNSConfig{
		Servers:       servers,
		Ndots:         5,
		ClusterDomain: "cluster.local",
		Namespace:     "openstack",
		Timeout:       timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCandidates(t *testing.T) {
	k8s := DNSConfig{Servers: []string{"10.96.0.10:53"}, Ndots: 5, ClusterDomain: "cluster.local", Namespace: "openstack"}
	ndots1 := k8s
	ndots1.Ndots = 1
	noNS := k8s
	noNS.Namespace = ""
	outside := DNSConfig{Servers: []string{"10.0.0.2:53"}, Ndots: 1}
	fromSearch := DNSConfig{Servers: []string{"10.96.0.10"}, Ndots: 5,
		Search: []string{"nova.svc.k8s.example.org", "svc.k8s.example.org", "k8s.example.org"}}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57)

	tests := []struct {
		name string
		cfg  DNSConfig
		in   string
		want []string
	}{
		{"bare service", k8s, "mariadb", []string{"mariadb.openstack.svc.cluster.local."}},
		{"service.namespace", k8s, "mariadb.openstack", []string{"mariadb.openstack.svc.cluster.local.", "mariadb.openstack."}},
		{"service.namespace.svc", k8s, "mariadb.openstack.svc", []string{"mariadb.openstack.svc.cluster.local.", "mariadb.openstack.svc."}},
		{"headless pod", k8s, "mariadb-0.mariadb.openstack", []string{"mariadb-0.mariadb.openstack.svc.cluster.local.", "mariadb-0.mariadb.openstack."}},
		{"headless pod .svc", k8s, "mariadb-0.mariadb.openstack.svc", []string{"mariadb-0.mariadb.openstack.svc.cluster.local.", "mariadb-0.mariadb.openstack.svc."}},
		{"in cluster domain", k8s, "mariadb.openstack.svc.cluster.local", []string{"mariadb.openstack.svc.cluster.local."}},
		{"in cluster domain, other case", k8s, "MariaDB.OpenStack.svc.Cluster.Local", []string{"MariaDB.OpenStack.svc.Cluster.Local."}},
		{"the cluster domain itself", k8s, "cluster.local", []string{"cluster.local."}},
		{"absolute", k8s, "db.example.com.", []string{"db.example.com."}},
		{"absolute bare", k8s, "mariadb.", []string{"mariadb."}},
		{"external, below ndots", k8s, "db.example.com", []string{"db.example.com.svc.cluster.local.", "db.example.com."}},
		{"external, four labels", k8s, "db.eu.example.com", []string{"db.eu.example.com."}},
		{"many dots", k8s, "a.b.c.d.e.f", []string{"a.b.c.d.e.f."}},
		{"suffix is not the cluster domain", k8s, "a.notcluster.local", []string{"a.notcluster.local.svc.cluster.local.", "a.notcluster.local."}},
		{"srv", k8s, "_mysql._tcp.mariadb.openstack", []string{"_mysql._tcp.mariadb.openstack.svc.cluster.local.", "_mysql._tcp.mariadb.openstack."}},
		{"srv own namespace", k8s, "_mysql._tcp.mariadb", []string{"_mysql._tcp.mariadb.openstack.svc.cluster.local."}},
		{"srv .svc", k8s, "_mysql._tcp.mariadb.openstack.svc", []string{"_mysql._tcp.mariadb.openstack.svc.cluster.local.", "_mysql._tcp.mariadb.openstack.svc."}},
		{"srv absolute", k8s, "_ldap._tcp.example.com.", []string{"_ldap._tcp.example.com."}},
		{"only underscore labels", k8s, "_a._b", []string{"_a._b."}},
		{"ndots 1: absolute first", ndots1, "mariadb.openstack", []string{"mariadb.openstack.", "mariadb.openstack.svc.cluster.local."}},
		{"ndots 1: bare name", ndots1, "mariadb", []string{"mariadb.openstack.svc.cluster.local."}},
		{"no namespace: bare name is absolute", noNS, "mariadb", []string{"mariadb."}},
		{"no namespace: service.namespace", noNS, "mariadb.openstack", []string{"mariadb.openstack.svc.cluster.local.", "mariadb.openstack."}},
		{"outside a cluster", outside, "mariadb.openstack", []string{"mariadb.openstack."}},
		{"outside a cluster, bare", outside, "localhost", []string{"localhost."}},
		{"domain and namespace from search", fromSearch, "placement", []string{"placement.nova.svc.k8s.example.org."}},
		{"cluster form too long", k8s, long, []string{long + "."}},
		{"empty", k8s, "", nil},
		{"root", k8s, ".", nil},
		{"empty label", k8s, "a..b", nil},
		{"leading dot", k8s, ".a", nil},
		{"two trailing dots", k8s, "a..", nil},
		{"space", k8s, "a b", nil},
		{"backslash", k8s, `a\.b`, nil},
		{"label too long", k8s, strings.Repeat("a", 64), nil},
		{"name too long", k8s, strings.Repeat("a.", 127) + "aa", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewResolver(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Candidates(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Candidates(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDNSAandAAAA(t *testing.T) {
	s := startDNS(t, byType(t, map[string][]string{
		"keystone.openstack.svc.cluster.local. A": {
			"keystone.openstack.svc.cluster.local. 5 IN A 10.0.0.2",
			"keystone.openstack.svc.cluster.local. 5 IN A 10.0.0.1",
		},
		"keystone.openstack.svc.cluster.local. AAAA": {"keystone.openstack.svc.cluster.local. 5 IN AAAA fd00::1"},
	}))
	r := newTestResolver(t, time.Second, s.Addr)
	ans, err := r.Lookup(context.Background(), "keystone")
	if err != nil {
		t.Fatal(err)
	}
	want := Answer{FQDN: "keystone.openstack.svc.cluster.local.", Addrs: []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1"),
	}}
	if !reflect.DeepEqual(ans, want) {
		t.Errorf("Lookup = %+v, want %+v", ans, want)
	}
	o := r.check(context.Background(), "keystone")
	if want := ready("keystone.openstack.svc.cluster.local. -> 10.0.0.1, 10.0.0.2, fd00::1"); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
}

func TestDNSOnlyAAAA(t *testing.T) {
	s := startDNS(t, byType(t, map[string][]string{
		"memcached.openstack.svc.cluster.local. A":    nil,
		"memcached.openstack.svc.cluster.local. AAAA": {"memcached.openstack.svc.cluster.local. 5 IN AAAA fd00::11"},
	}))
	r := newTestResolver(t, time.Second, s.Addr)
	o := r.check(context.Background(), "memcached")
	if want := ready("memcached.openstack.svc.cluster.local. -> fd00::11"); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
}

func TestDNSCNAME(t *testing.T) {
	// An ExternalName service: a CNAME, with the target's address alongside.
	// A record for a name outside the chain must not be taken.
	s := startDNS(t, byType(t, map[string][]string{
		"db.openstack.svc.cluster.local. A": {
			"db.openstack.svc.cluster.local. 5 IN CNAME db.example.com.",
			"db.example.com. 5 IN A 192.0.2.10",
			"other.example.com. 5 IN A 192.0.2.99",
		},
		"db.openstack.svc.cluster.local. AAAA": {"db.openstack.svc.cluster.local. 5 IN CNAME db.example.com."},
	}))
	r := newTestResolver(t, time.Second, s.Addr)
	ans, err := r.Lookup(context.Background(), "db")
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{netip.MustParseAddr("192.0.2.10")}; !reflect.DeepEqual(ans.Addrs, want) {
		t.Errorf("Addrs = %v, want %v", ans.Addrs, want)
	}
}

func TestDNSNXDOMAIN(t *testing.T) {
	s := startDNS(t, func(q *dns.Msg, _ string) *dns.Msg { return reply(q, dns.RcodeNameError) })
	r := newTestResolver(t, time.Second, s.Addr)

	_, err := r.Lookup(context.Background(), "mariadb")
	if !errors.Is(err, ErrNoRecords) {
		t.Fatalf("Lookup error = %v, want ErrNoRecords", err)
	}
	var ue *DNSUnhealthyError
	if errors.As(err, &ue) {
		t.Errorf("NXDOMAIN reported as unhealthy: %v", err)
	}
	// NXDOMAIN holds for every type: no AAAA query after it.
	if q := s.Log(); len(q) != 1 || q[0].Type != dns.TypeA || q[0].Name != "mariadb.openstack.svc.cluster.local." {
		t.Errorf("queries = %+v, want one A query for the cluster name", q)
	}

	o := r.check(context.Background(), "mariadb")
	if want := waiting("NXDOMAIN for mariadb.openstack.svc.cluster.local."); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
	o = r.check(context.Background(), "mariadb.openstack")
	if want := waiting("NXDOMAIN for mariadb.openstack.svc.cluster.local.; NXDOMAIN for mariadb.openstack."); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
}

func TestDNSNODATA(t *testing.T) {
	s := startDNS(t, func(q *dns.Msg, _ string) *dns.Msg { return reply(q, dns.RcodeSuccess) })
	r := newTestResolver(t, time.Second, s.Addr)
	_, err := r.Lookup(context.Background(), "rabbitmq")
	if !errors.Is(err, ErrNoRecords) {
		t.Fatalf("Lookup error = %v, want ErrNoRecords", err)
	}
	o := r.check(context.Background(), "rabbitmq")
	if want := waiting("no A/AAAA records for rabbitmq.openstack.svc.cluster.local."); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
	var types []uint16
	for _, q := range s.Log() {
		types = append(types, q.Type)
	}
	if want := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeA, dns.TypeAAAA}; !reflect.DeepEqual(types, want) {
		t.Errorf("query types = %v, want %v", types, want)
	}
}

func TestDNSUnhealthyRcodes(t *testing.T) {
	for _, rcode := range []int{dns.RcodeServerFailure, dns.RcodeRefused} {
		name := dns.RcodeToString[rcode]
		t.Run(name, func(t *testing.T) {
			s := startDNS(t, func(q *dns.Msg, _ string) *dns.Msg { return reply(q, rcode) })
			r := newTestResolver(t, time.Second, s.Addr)
			_, err := r.Lookup(context.Background(), "glance-api")
			var ue *DNSUnhealthyError
			if !errors.As(err, &ue) {
				t.Fatalf("Lookup error = %v, want *DNSUnhealthyError", err)
			}
			if errors.Is(err, ErrNoRecords) {
				t.Errorf("%s reported as not found: %v", name, err)
			}
			want := []DNSFailure{{Server: s.Addr, Rcode: rcode}}
			if ue.Name != "glance-api.openstack.svc.cluster.local." || !reflect.DeepEqual(ue.Failures, want) {
				t.Errorf("error = %+v, want name glance-api.openstack.svc.cluster.local. and failures %+v", ue, want)
			}
			o := r.check(context.Background(), "glance-api")
			if want := unhealthy("DNS unhealthy: %s from %s for glance-api.openstack.svc.cluster.local.", name, s.Addr); o != want {
				t.Errorf("check = %+v, want %+v", o, want)
			}
		})
	}
}

func TestDNSTimeout(t *testing.T) {
	s := startDNS(t, func(*dns.Msg, string) *dns.Msg { return nil })
	r := newTestResolver(t, 50*time.Millisecond, s.Addr)
	// Two candidates; the server is not asked again once it has timed out.
	_, err := r.Lookup(context.Background(), "db.example.com")
	var ue *DNSUnhealthyError
	if !errors.As(err, &ue) {
		t.Fatalf("Lookup error = %v, want *DNSUnhealthyError", err)
	}
	if errors.Is(err, ErrNoRecords) {
		t.Errorf("timeout reported as not found: %v", err)
	}
	if len(ue.Failures) != 1 || ue.Failures[0].Rcode != -1 || !isTimeout(ue.Failures[0].Err) {
		t.Errorf("failures = %+v, want one timeout", ue.Failures)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not unwrap to a deadline error", err)
	}
	if q := s.Log(); len(q) != 1 {
		t.Errorf("queries = %+v, want 1", q)
	}
	o := r.check(context.Background(), "db.example.com")
	if want := unhealthy("DNS unhealthy: timeout from %s for db.example.com.svc.cluster.local.", s.Addr); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
}

func TestDNSUnreachable(t *testing.T) {
	// A UDP port with nothing behind it: the kernel refuses at once.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	r := newTestResolver(t, time.Second, addr)
	o := r.check(context.Background(), "nova-api")
	if o.State != Unhealthy || !strings.HasPrefix(o.Detail, "DNS unhealthy: error (") || !strings.Contains(o.Detail, addr) {
		t.Errorf("check = %+v, want unhealthy naming %s", o, addr)
	}
}

func TestDNSFailover(t *testing.T) {
	bad := startDNS(t, func(q *dns.Msg, _ string) *dns.Msg { return reply(q, dns.RcodeServerFailure) })
	good := startDNS(t, byType(t, map[string][]string{
		"neutron-server.openstack.svc.cluster.local. A":    {"neutron-server.openstack.svc.cluster.local. 5 IN A 10.0.0.7"},
		"neutron-server.openstack.svc.cluster.local. AAAA": nil,
	}))
	r := newTestResolver(t, time.Second, bad.Addr, good.Addr)
	ans, err := r.Lookup(context.Background(), "neutron-server")
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.7")}; !reflect.DeepEqual(ans.Addrs, want) {
		t.Errorf("Addrs = %v, want %v", ans.Addrs, want)
	}
	// The failing server is left after its first failure, for both types.
	if q := bad.Log(); len(q) != 1 {
		t.Errorf("failing server got %+v, want one A query", q)
	}
	if q := good.Log(); len(q) != 2 {
		t.Errorf("good server got %+v, want A and AAAA", q)
	}

	t.Run("all fail", func(t *testing.T) {
		silent := startDNS(t, func(*dns.Msg, string) *dns.Msg { return nil })
		r := newTestResolver(t, 50*time.Millisecond, bad.Addr, silent.Addr)
		o := r.check(context.Background(), "neutron-server")
		want := unhealthy("DNS unhealthy: SERVFAIL from %s, timeout from %s for neutron-server.openstack.svc.cluster.local.", bad.Addr, silent.Addr)
		if o != want {
			t.Errorf("check = %+v, want %+v", o, want)
		}
	})
}

func TestDNSNextCandidate(t *testing.T) {
	s := startDNS(t, byType(t, map[string][]string{
		"db.example.com. A":    {"db.example.com. 60 IN A 192.0.2.1"},
		"db.example.com. AAAA": nil,
	}))
	r := newTestResolver(t, time.Second, s.Addr)
	ans, err := r.Lookup(context.Background(), "db.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if ans.FQDN != "db.example.com." {
		t.Errorf("FQDN = %q, want db.example.com.", ans.FQDN)
	}
}

func TestDNSUnhealthyIsNotNotFound(t *testing.T) {
	// The cluster name fails, the absolute one is NXDOMAIN: nobody knows
	// whether the service exists, so it must not read as "not found".
	s := startDNS(t, func(q *dns.Msg, _ string) *dns.Msg {
		if strings.HasSuffix(q.Question[0].Name, ".cluster.local.") {
			return reply(q, dns.RcodeServerFailure)
		}
		return reply(q, dns.RcodeNameError)
	})
	r := newTestResolver(t, time.Second, s.Addr)
	o := r.check(context.Background(), "mariadb.openstack")
	if want := unhealthy("DNS unhealthy: SERVFAIL from %s for mariadb.openstack.svc.cluster.local.", s.Addr); o != want {
		t.Errorf("check = %+v, want %+v", o, want)
	}
}

func TestDNSTruncatedHeadless(t *testing.T) {
	const fqdn = "rabbitmq.openstack.svc.cluster.local."
	var recs []string
	var want []netip.Addr
	for i := range 200 {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i / 100), byte(i%100 + 1)})
		recs = append(recs, fmt.Sprintf("%s 5 IN A %s", fqdn, a))
		want = append(want, a)
	}
	// Reverse order: the answer must come back sorted.
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	s := startDNS(t, byType(t, map[string][]string{fqdn + " A": recs, fqdn + " AAAA": nil}))
	r := newTestResolver(t, time.Second, s.Addr)
	ans, err := r.Lookup(context.Background(), "rabbitmq")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ans.Addrs, want) {
		t.Errorf("got %d addresses, want all 200 in order: %v", len(ans.Addrs), ans.Addrs)
	}
	var path []string
	for _, q := range s.Log() {
		path = append(path, q.Net+" "+dns.TypeToString[q.Type])
	}
	if want := []string{"udp A", "tcp A", "udp AAAA"}; !reflect.DeepEqual(path, want) {
		t.Errorf("queries = %v, want %v (the A answer truncated over UDP, then asked over TCP)", path, want)
	}
	o := r.check(context.Background(), "rabbitmq")
	if want := "rabbitmq.openstack.svc.cluster.local. -> 10.1.0.1, 10.1.0.2, 10.1.0.3, 10.1.0.4, 10.1.0.5, 10.1.0.6, 10.1.0.7, 10.1.0.8 and 192 more"; o.State != Ready || o.Detail != want {
		t.Errorf("check = %+v, want ready %q", o, want)
	}
}

func TestDNSEDNS0(t *testing.T) {
	big := make([]string, 150)
	for i := range big {
		big[i] = fmt.Sprintf("ovn.openstack.svc.cluster.local. 5 IN A 10.2.0.%d", i+1)
	}
	s := startDNS(t, byType(t, map[string][]string{
		"ovn.openstack.svc.cluster.local. A":               big,
		"ovn.openstack.svc.cluster.local. AAAA":            nil,
		"_ovsdb._tcp.ovn.openstack.svc.cluster.local. SRV": nil,
	}))
	r := newTestResolver(t, time.Second, s.Addr)
	if _, err := r.Lookup(context.Background(), "ovn"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(context.Background(), "_ovsdb._tcp.ovn"); !errors.Is(err, ErrNoRecords) {
		t.Fatalf("SRV Lookup error = %v, want ErrNoRecords", err)
	}
	q := s.Log()
	if len(q) != 4 {
		t.Errorf("queries = %+v, want udp A, tcp A, udp AAAA, udp SRV", q)
	}
	for _, q := range q {
		if q.EDNS0 != 4096 {
			t.Errorf("%s %s query over %s: EDNS0 size %d, want 4096", q.Name, dns.TypeToString[q.Type], q.Net, q.EDNS0)
		}
	}
}

func TestDNSSRV(t *testing.T) {
	const fqdn = "_mysql._tcp.mariadb.openstack.svc.cluster.local."
	s := startDNS(t, func(q *dns.Msg, _ string) *dns.Msg {
		if q.Question[0].Name != fqdn || q.Question[0].Qtype != dns.TypeSRV {
			return reply(q, dns.RcodeNameError)
		}
		m := reply(q, dns.RcodeSuccess,
			rr(t, fqdn+" 5 IN SRV 10 50 3306 mariadb-1.mariadb.openstack.svc.cluster.local."),
			rr(t, fqdn+" 5 IN SRV 0 10 3306 mariadb-2.mariadb.openstack.svc.cluster.local."),
			rr(t, fqdn+" 5 IN SRV 0 60 3306 mariadb-0.mariadb.openstack.svc.cluster.local."),
		)
		m.Extra = []dns.RR{
			rr(t, "mariadb-1.mariadb.openstack.svc.cluster.local. 5 IN A 10.0.1.2"),
			rr(t, "mariadb-0.mariadb.openstack.svc.cluster.local. 5 IN A 10.0.1.1"),
			rr(t, "unrelated.example.com. 5 IN A 192.0.2.1"),
		}
		return m
	})
	r := newTestResolver(t, time.Second, s.Addr)
	ans, err := r.Lookup(context.Background(), "_mysql._tcp.mariadb.openstack")
	if err != nil {
		t.Fatal(err)
	}
	want := Answer{
		FQDN:  fqdn,
		Addrs: []netip.Addr{netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2")},
		SRV: []SRV{
			{Target: "mariadb-0.mariadb.openstack.svc.cluster.local.", Port: 3306, Priority: 0, Weight: 60},
			{Target: "mariadb-2.mariadb.openstack.svc.cluster.local.", Port: 3306, Priority: 0, Weight: 10},
			{Target: "mariadb-1.mariadb.openstack.svc.cluster.local.", Port: 3306, Priority: 10, Weight: 50},
		},
	}
	if !reflect.DeepEqual(ans, want) {
		t.Errorf("Lookup = %+v, want %+v", ans, want)
	}
	for _, q := range s.Log() {
		if q.Type != dns.TypeSRV {
			t.Errorf("query for %s type %s, want SRV only", q.Name, dns.TypeToString[q.Type])
		}
	}
	o := r.check(context.Background(), "_mysql._tcp.mariadb.openstack")
	wantDetail := fqdn + " -> mariadb-0.mariadb.openstack.svc.cluster.local.:3306, mariadb-2.mariadb.openstack.svc.cluster.local.:3306, mariadb-1.mariadb.openstack.svc.cluster.local.:3306"
	if o != ready("%s", wantDetail) {
		t.Errorf("check = %+v, want ready %q", o, wantDetail)
	}
}

func TestDNSCanceled(t *testing.T) {
	s := startDNS(t, func(*dns.Msg, string) *dns.Msg { return nil })
	r := newTestResolver(t, time.Minute, s.Addr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Lookup(ctx, "mariadb")
	var ue *DNSUnhealthyError
	if !errors.Is(err, context.Canceled) || errors.As(err, &ue) || errors.Is(err, ErrNoRecords) {
		t.Errorf("Lookup error = %v, want context.Canceled only", err)
	}
	if o := r.check(ctx, "mariadb"); o.State != Waiting {
		t.Errorf("check = %+v, want waiting", o)
	}
}

func TestDNSBadName(t *testing.T) {
	r := newTestResolver(t, time.Second, "127.0.0.1:53")
	if _, err := r.Lookup(context.Background(), "a..b"); err == nil || errors.Is(err, ErrNoRecords) {
		t.Errorf("Lookup(a..b) error = %v, want a bad-name error", err)
	}
	if o := r.check(context.Background(), "a b"); o.State != Failed {
		t.Errorf("check(a b) = %+v, want failed", o)
	}
}

func TestNewResolver(t *testing.T) {
	ok := DNSConfig{Servers: []string{"10.96.0.10:53"}}
	with := func(f func(*DNSConfig)) DNSConfig {
		c := ok
		f(&c)
		return c
	}
	bad := []struct {
		cfg  DNSConfig
		want string
	}{
		{DNSConfig{}, "no DNS server"},
		{with(func(c *DNSConfig) { c.Servers = []string{"kube-dns:53"} }), `server "kube-dns:53": host "kube-dns" is not an IP address`},
		{with(func(c *DNSConfig) { c.Servers = []string{"10.96.0.10:0"} }), `server "10.96.0.10:0": port "0"`},
		{with(func(c *DNSConfig) { c.Servers = []string{"10.96.0.10:dns"} }), `port "dns"`},
		{with(func(c *DNSConfig) { c.Servers = []string{"nonsense"} }), "want IP:PORT"},
		{with(func(c *DNSConfig) { c.Ndots = -1 }), "ndots -1"},
		{with(func(c *DNSConfig) { c.Ndots = 16 }), "ndots 16"},
		{with(func(c *DNSConfig) { c.Timeout = -time.Second }), "negative timeout"},
		{with(func(c *DNSConfig) { c.ClusterDomain = "cluster..local" }), `cluster domain "cluster..local"`},
		{with(func(c *DNSConfig) { c.ClusterDomain = "cluster.local"; c.Namespace = "Open_Stack" }), `namespace "Open_Stack"`},
	}
	for _, tt := range bad {
		if _, err := NewResolver(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewResolver(%+v) error = %v, want it to contain %q", tt.cfg, err, tt.want)
		}
	}

	r, err := NewResolver(DNSConfig{Servers: []string{"10.96.0.10", "fd00::a"}, ClusterDomain: "cluster.local.",
		Search: []string{"glance.svc.cluster.local", "svc.cluster.local"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.96.0.10:53", "[fd00::a]:53"}; !reflect.DeepEqual(r.servers, want) {
		t.Errorf("servers = %q, want %q", r.servers, want)
	}
	if r.domain != "cluster.local" || r.namespace != "glance" || r.timeout != 2*time.Second {
		t.Errorf("resolver = %+v, want domain cluster.local, namespace glance (from search), timeout 2s", r)
	}
	// An explicit cluster domain takes the namespace only from a matching entry.
	r, err = NewResolver(DNSConfig{Servers: []string{"10.96.0.10"}, ClusterDomain: "k8s.example.org",
		Search: []string{"glance.svc.cluster.local"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.domain != "k8s.example.org" || r.namespace != "" {
		t.Errorf("resolver = %+v, want domain k8s.example.org and no namespace", r)
	}
}

func writeResolvConf(t testing.TB, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadResolvConf(t *testing.T) {
	tests := []struct {
		name string
		text string
		want DNSConfig
	}{
		{
			name: "kubelet, ClusterFirst",
			text: "search openstack.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
			want: DNSConfig{
				Servers: []string{"10.96.0.10:53"},
				Search:  []string{"openstack.svc.cluster.local", "svc.cluster.local", "cluster.local"},
				Ndots:   5, ClusterDomain: "cluster.local", Namespace: "openstack",
			},
		},
		{
			name: "kubelet with host search domains and a custom domain",
			text: "search nova.svc.k8s.example.org svc.k8s.example.org k8s.example.org dc1.example.org\n" +
				"nameserver 169.254.20.10\nnameserver fd00:10:96::a\noptions ndots:5 single-request-reopen\n",
			want: DNSConfig{
				Servers: []string{"169.254.20.10:53", "[fd00:10:96::a]:53"},
				Search:  []string{"nova.svc.k8s.example.org", "svc.k8s.example.org", "k8s.example.org", "dc1.example.org"},
				Ndots:   5, ClusterDomain: "k8s.example.org", Namespace: "nova",
			},
		},
		{
			name: "host",
			text: "# Generated by NetworkManager\n; old style comment\ndomain corp.example.com\nsearch corp.example.com example.com.\n" +
				"nameserver 192.168.1.1 # router\n\n  nameserver\t192.168.1.2\noptions edns0 timeout:1 attempts:2 rotate\n",
			want: DNSConfig{
				Servers: []string{"192.168.1.1:53", "192.168.1.2:53"},
				Search:  []string{"corp.example.com", "example.com"},
				Ndots:   1, Timeout: time.Second,
			},
		},
		{
			name: "glibc caps, last search wins",
			text: "search a.svc.cluster.local\nsearch b.example.com\nnameserver 127.0.0.53\noptions ndots:99 timeout:90\n",
			want: DNSConfig{Servers: []string{"127.0.0.53:53"}, Search: []string{"b.example.com"}, Ndots: 15, Timeout: 30 * time.Second},
		},
		{
			name: "no final newline, CRLF",
			text: "nameserver 10.0.0.10\r\noptions ndots:2",
			want: DNSConfig{Servers: []string{"10.0.0.10:53"}, Ndots: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadResolvConf(writeResolvConf(t, tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LoadResolvConf = %+v, want %+v", got, tt.want)
			}
			if _, err := NewResolver(got); err != nil {
				t.Errorf("NewResolver: %v", err)
			}
		})
	}

	t.Run("kubelet file drives Candidates", func(t *testing.T) {
		cfg, err := LoadResolvConf(writeResolvConf(t, "search openstack.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewResolver(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Candidates("keystone"), []string{"keystone.openstack.svc.cluster.local."}; !reflect.DeepEqual(got, want) {
			t.Errorf("Candidates = %q, want %q", got, want)
		}
	})
}

func TestLoadResolvConfErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
		line             int // 0: no line number in the error
	}{
		{"empty", "", "no nameserver line", 0},
		{"search only", "search openstack.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", "no nameserver line", 0},
		{"commented out", "#nameserver 10.96.0.10\n", "no nameserver line", 0},
		{"hostname", "search x\nnameserver kube-dns.kube-system\n", `nameserver "kube-dns.kube-system" is not an IP address`, 2},
		{"with port", "nameserver 10.96.0.10:53\n", `nameserver "10.96.0.10:53" is not an IP address`, 1},
		{"bracket in the zone", "nameserver ::%[\n", `nameserver "::%[": want IP:PORT`, 1},
		{"no address", "nameserver 10.96.0.10\nnameserver\n", "nameserver without an address", 2},
		{"bad ndots", "nameserver 10.96.0.10\noptions ndots:five\n", "options ndots:five", 2},
		{"negative timeout", "nameserver 10.96.0.10\n\noptions timeout:-1\n", "options timeout:-1", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeResolvConf(t, tt.text)
			_, err := LoadResolvConf(p)
			if err == nil {
				t.Fatal("no error")
			}
			prefix := p + ": "
			if tt.line > 0 {
				prefix = fmt.Sprintf("%s:%d: ", p, tt.line)
			}
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want %q... containing %q", err, prefix, tt.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "resolv.conf")
		if _, err := LoadResolvConf(p); err == nil || !strings.Contains(err.Error(), p) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error = %v, want one naming %s and matching os.ErrNotExist", err, p)
		}
	})
}

func FuzzLoadResolvConf(f *testing.F) {
	for _, s := range []string{
		"search openstack.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
		"nameserver fe80::1%eth0\nsearch UPPER.svc.cluster.local\n",
		"nameserver 1.2.3.4\nsearch a.svc.b..c _x.svc.cluster.local -.svc.x\noptions ndots:0 timeout:0\n",
		"domain x\nnameserver ::1\noptions ndots:",
		"",
		"nameserver",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p := writeResolvConf(t, text)
		cfg, err := LoadResolvConf(p)
		if err != nil {
			if !strings.HasPrefix(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(cfg.Servers) == 0 || cfg.Ndots < 0 || cfg.Ndots > 15 || cfg.Timeout < 0 {
			t.Fatalf("accepted config %+v", cfg)
		}
		// Whatever LoadResolvConf accepts, NewResolver accepts.
		if _, err := NewResolver(cfg); err != nil {
			t.Fatalf("NewResolver(%+v): %v", cfg, err)
		}
	})
}

func FuzzCandidates(f *testing.F) {
	for _, s := range []string{
		"mariadb", "mariadb.openstack", "mariadb.openstack.svc", "mariadb-0.mariadb.openstack",
		"mariadb.openstack.svc.cluster.local", "db.example.com.", "_mysql._tcp.mariadb.openstack",
		"_a", ".", "a..b", "", strings.Repeat("a.", 126) + "a",
	} {
		f.Add(s, uint8(5))
	}
	f.Fuzz(func(t *testing.T, name string, ndots uint8) {
		r, err := NewResolver(DNSConfig{Servers: []string{"127.0.0.1:53"}, Ndots: int(ndots % 16),
			ClusterDomain: "cluster.local", Namespace: "openstack"})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range r.Candidates(name) {
			if !strings.HasSuffix(c, ".") {
				t.Errorf("candidate %q of %q has no trailing dot", c, name)
			}
			if _, ok := dns.IsDomainName(c); !ok || len(c) > 254 {
				t.Errorf("candidate %q of %q is not a DNS name", c, name)
			}
			if seen[strings.ToLower(c)] {
				t.Errorf("candidate %q of %q given twice", c, name)
			}
			seen[strings.ToLower(c)] = true
		}
	})
}
