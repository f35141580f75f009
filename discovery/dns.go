package discovery

// Cluster DNS, the way the cluster means it.
//
// A dns: dependency is looked up with github.com/miekg/dns against the
// servers of the pod's resolv.conf (or --dns-server), never through the host
// resolver, so that the answer can be classified:
//
//   - an answer with at least one record: ready (a headless service counts as
//     soon as one of its pods has an A or AAAA record);
//   - NXDOMAIN, or NOERROR without records (NODATA): not there yet, keep
//     waiting;
//   - SERVFAIL, REFUSED (any other rcode), a timeout or a network error: the
//     DNS service itself is unhealthy. The next server is asked; when every
//     server fails, the lookup says "DNS unhealthy" and names the servers. It
//     is never reported as "not found".
//
// Every query carries EDNS0 with a 4096-byte buffer, and a UDP answer with the
// TC bit is asked again over TCP, so large headless answers arrive whole.
//
// Stale negative answers: a cluster DNS cache (CoreDNS' cache plugin,
// node-local-dns) may keep serving NXDOMAIN for a name that has just appeared,
// for up to its negative TTL (30 s on kubeadm clusters). Nothing here can see
// through that; callers keep looking, with backoff, until their timeout, and
// should allow for that delay in the timeouts they choose.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// defaultDNSTimeout bounds one query attempt when DNSConfig.Timeout is 0.
	defaultDNSTimeout = 2 * time.Second
	// ednsBufferSize is the EDNS0 UDP payload size offered on every query.
	ednsBufferSize = 4096
	// maxNdots is glibc's cap on options ndots.
	maxNdots = 15
	// maxResolvTimeout is glibc's cap on options timeout.
	maxResolvTimeout = 30 * time.Second
)

// DNSConfig says where and how to look names up.
type DNSConfig struct {
	// Servers are HOST:PORT addresses (HOST an IP address), tried in order.
	// A bare IP address means port 53.
	Servers []string
	// Search is resolv.conf's search list. It is not walked (see
	// Candidates); it only supplies ClusterDomain and Namespace when those
	// are empty.
	Search []string
	// Ndots: a name with at least this many dots is tried as an absolute
	// name before its cluster forms. 0 and 1 behave the same (a one-label
	// name is never tried as absolute while it has a cluster form).
	Ndots int
	// ClusterDomain is the cluster's DNS domain, e.g. cluster.local. Empty
	// outside a cluster: then names are only tried as absolute names.
	ClusterDomain string
	// Namespace is the pod's namespace, used for one-label names.
	Namespace string
	// Timeout bounds one query attempt (one server, one record type, one
	// transport); 0 means 2s.
	Timeout time.Duration
}

// LoadResolvConf reads the nameserver, search (and domain) lines and options
// ndots and timeout from a resolv.conf, as glibc would: the last search or
// domain line wins, ndots is capped at 15 and timeout at 30 s, other options
// are ignored. ClusterDomain and Namespace come from the first search entry of
// the form <ns>.svc.<domain>, as the kubelet writes it. Errors name the file,
// and the line when one is at fault; a file without a nameserver is an error.
func LoadResolvConf(path string) (DNSConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return DNSConfig{}, fmt.Errorf("resolv.conf: %w", err)
	}
	return parseResolvConf(path, string(data))
}

func parseResolvConf(path, text string) (DNSConfig, error) {
	cfg := DNSConfig{Ndots: 1}
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		where := fmt.Sprintf("%s:%d", path, i+1)
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				return DNSConfig{}, fmt.Errorf("%s: nameserver without an address", where)
			}
			a, err := netip.ParseAddr(f[1])
			if err != nil {
				return DNSConfig{}, fmt.Errorf("%s: nameserver %q is not an IP address", where, f[1])
			}
			// The resolver's own check, so that what this accepts it takes:
			// netip accepts any IPv6 zone, and one with a bracket ("::%[")
			// breaks HOST:PORT.
			addr, err := serverAddr(net.JoinHostPort(a.String(), "53"))
			if err != nil {
				return DNSConfig{}, fmt.Errorf("%s: nameserver %q: %v", where, f[1], err)
			}
			cfg.Servers = append(cfg.Servers, addr)
		case "search", "domain":
			cfg.Search = nil
			for _, s := range f[1:] {
				if s = strings.TrimSuffix(s, "."); s != "" {
					cfg.Search = append(cfg.Search, s)
				}
			}
		case "options":
			for _, o := range f[1:] {
				k, v, ok := strings.Cut(o, ":")
				if !ok || (k != "ndots" && k != "timeout") {
					continue // rotate, edns0, attempts, ...: not ours to follow
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return DNSConfig{}, fmt.Errorf("%s: options %s: want a whole number of 0 or more", where, o)
				}
				if k == "ndots" {
					cfg.Ndots = min(n, maxNdots)
				} else {
					cfg.Timeout = min(time.Duration(max(n, 1))*time.Second, maxResolvTimeout)
				}
			}
		}
	}
	if len(cfg.Servers) == 0 {
		return DNSConfig{}, fmt.Errorf("%s: no nameserver line", path)
	}
	cfg.ClusterDomain, cfg.Namespace = clusterFromSearch(cfg.Search, "")
	return cfg, nil
}

// clusterFromSearch finds the first search entry <ns>.svc.<domain> with a
// valid namespace and domain (and, when domain is given, that domain).
func clusterFromSearch(search []string, domain string) (string, string) {
	for _, s := range search {
		ns, rest, ok := strings.Cut(strings.TrimSuffix(s, "."), ".")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 {
			continue
		}
		d, ok := cutPrefixFold(rest, "svc.")
		if !ok || !validDomain(d) || (domain != "" && !strings.EqualFold(d, domain)) {
			continue
		}
		return d, ns
	}
	return "", ""
}

func validDomain(d string) bool {
	_, ok := splitName(d)
	return ok && !strings.HasPrefix(d, "_")
}

// Resolver looks up dns: dependencies. It holds no mutable state; one
// Resolver may serve any number of goroutines.
type Resolver struct {
	servers   []string
	domain    string // without the trailing dot; "" outside a cluster
	namespace string
	ndots     int
	timeout   time.Duration
}

// NewResolver checks cfg and returns a Resolver for it. It needs at least one
// server, each an IP address with a port; the cluster domain must be a DNS
// name and the namespace a DNS label. When ClusterDomain (or Namespace) is
// empty it is taken from a search entry <ns>.svc.<domain>.
// ClusterDomain is the cluster's DNS domain ("" outside a cluster).
func (r *Resolver) ClusterDomain() string { return r.domain }

func NewResolver(cfg DNSConfig) (*Resolver, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("dns config: no DNS server")
	}
	r := &Resolver{ndots: cfg.Ndots, timeout: cfg.Timeout}
	for _, s := range cfg.Servers {
		addr, err := serverAddr(s)
		if err != nil {
			return nil, fmt.Errorf("dns config: server %q: %v", s, err)
		}
		r.servers = append(r.servers, addr)
	}
	if r.ndots < 0 || r.ndots > maxNdots {
		return nil, fmt.Errorf("dns config: ndots %d: want 0 to %d", r.ndots, maxNdots)
	}
	if r.timeout < 0 {
		return nil, fmt.Errorf("dns config: negative timeout %v", r.timeout)
	}
	if r.timeout == 0 {
		r.timeout = defaultDNSTimeout
	}
	r.domain = strings.TrimSuffix(cfg.ClusterDomain, ".")
	r.namespace = cfg.Namespace
	if r.domain == "" {
		var ns string
		r.domain, ns = clusterFromSearch(cfg.Search, "")
		r.namespace = cmp.Or(r.namespace, ns)
	} else if r.namespace == "" {
		_, r.namespace = clusterFromSearch(cfg.Search, r.domain)
	}
	if r.domain != "" && !validDomain(r.domain) {
		return nil, fmt.Errorf("dns config: cluster domain %q is not a DNS name", cfg.ClusterDomain)
	}
	if r.namespace != "" {
		if errs := validation.IsDNS1123Label(r.namespace); len(errs) > 0 {
			return nil, fmt.Errorf("dns config: namespace %q: %s", r.namespace, strings.Join(errs, "; "))
		}
	}
	return r, nil
}

func serverAddr(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if _, perr := netip.ParseAddr(s); perr != nil {
			return "", errors.New("want IP:PORT")
		}
		host, port = s, "53"
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return "", fmt.Errorf("host %q is not an IP address", host)
	}
	if err := validPort(port); err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// Candidates returns the absolute names (with the trailing dot) that Lookup
// tries for name, in order; nil when name is not a DNS name.
//
// The rule, with <ns> the pod's namespace and <domain> the cluster domain:
//
//   - a name ending in "." is absolute and tried alone; so is a name ending in
//     ".<domain>" (or equal to it).
//   - otherwise the name's cluster form, from the labels left after any
//     leading "_" labels (SRV's _port._proto) are set aside:
//     svc                 -> svc.<ns>.svc.<domain>.   (needs a namespace)
//     svc.ns              -> svc.ns.svc.<domain>.
//     svc.ns.svc          -> svc.ns.svc.<domain>.
//     pod-0.svc.ns        -> pod-0.svc.ns.svc.<domain>.   (headless pod record)
//     pod-0.svc.ns.svc    -> pod-0.svc.ns.svc.<domain>.
//     _port._tcp.svc.ns   -> _port._tcp.svc.ns.svc.<domain>.
//     and then the name itself as absolute (db.example.com -> db.example.com.),
//     except for a one-label name, which would be a top-level domain: asking
//     for it only sends a useless query to the cluster's upstream resolvers,
//     whose failure would then read as "DNS unhealthy".
//   - a name with at least Ndots dots tries the absolute form first.
//
// This is at most two names, not resolv.conf's search-list walk (up to
// four queries per record type with the kubelet's three search entries and
// ndots:5), which would multiply the queries a waiting pod makes for nothing:
// the cluster forms above are the only ones cluster DNS answers.
func (r *Resolver) Candidates(name string) []string {
	labels, ok := splitName(name)
	if !ok {
		return nil
	}
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	if r.domain != "" && (strings.EqualFold(name, r.domain) || hasSuffixFold(name, "."+r.domain)) {
		return []string{name + "."}
	}
	abs := name + "."
	host := labels
	for len(host) > 0 && strings.HasPrefix(host[0], "_") {
		host = host[1:]
	}
	cluster := r.clusterForm(name, host)
	if len(cluster) > 254 {
		cluster = "" // longer than a DNS name may be
	}
	switch {
	case cluster == "":
		return []string{abs}
	case len(host) == 1:
		return []string{cluster}
	case len(labels)-1 >= r.ndots:
		return []string{abs, cluster}
	default:
		return []string{cluster, abs}
	}
}

// clusterForm is name's cluster-domain form, or "" when it has none; host is
// name's labels after the leading "_" ones.
func (r *Resolver) clusterForm(name string, host []string) string {
	if r.domain == "" || len(host) == 0 {
		return ""
	}
	last := host[len(host)-1]
	switch {
	case len(host) == 1 && r.namespace != "":
		return name + "." + r.namespace + ".svc." + r.domain + "."
	case len(host) == 2, len(host) == 3 && !strings.EqualFold(last, "svc"):
		return name + ".svc." + r.domain + "."
	case (len(host) == 3 || len(host) == 4) && strings.EqualFold(last, "svc"):
		return name + "." + r.domain + "."
	}
	return ""
}

// splitName returns the labels of a DNS name (a trailing dot allowed), or
// false when it is not one: empty, an empty or over-long label, over 253
// characters, or characters (space, backslash, controls) that would make the
// query ambiguous.
func splitName(name string) ([]string, bool) {
	n := strings.TrimSuffix(name, ".")
	if n == "" || len(n) > 253 {
		return nil, false
	}
	for _, c := range n {
		if c <= ' ' || c == '\\' || c == 0x7f || c > 0x7e {
			return nil, false
		}
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return nil, false
		}
	}
	return labels, true
}

// Answer is what a successful Lookup found.
type Answer struct {
	// FQDN is the absolute name that answered, with the trailing dot.
	FQDN string
	// Addrs are the A and AAAA addresses, sorted, without duplicates. For an
	// SRV lookup, the addresses of the targets the server added to its answer.
	Addrs []netip.Addr
	// SRV are the SRV records (SRV lookups only), by priority, then weight
	// (highest first), target and port.
	SRV []SRV
}

// SRV is one SRV record.
type SRV struct {
	Target           string // absolute, with the trailing dot
	Port             uint16
	Priority, Weight uint16
}

// ErrNoRecords is matched (errors.Is) by a Lookup error when every candidate
// name was NXDOMAIN or had no records of the type asked: not there yet.
var ErrNoRecords = errors.New("no DNS records")

// noRecordsError says, per candidate name, which negative answer it got.
type noRecordsError struct{ misses []dnsMiss }

type dnsMiss struct {
	name     string
	nxdomain bool
	types    string // "A/AAAA" or "SRV"
}

func (e *noRecordsError) Error() string {
	parts := make([]string, len(e.misses))
	for i, m := range e.misses {
		if m.nxdomain {
			parts[i] = "NXDOMAIN for " + m.name
		} else {
			parts[i] = "no " + m.types + " records for " + m.name
		}
	}
	return strings.Join(parts, "; ")
}

func (e *noRecordsError) Is(target error) bool { return target == ErrNoRecords }

// DNSUnhealthyError is a Lookup error when no server gave a usable answer for
// Name: each failed (SERVFAIL, REFUSED or another error rcode), timed out or
// could not be reached. It is never "not found".
type DNSUnhealthyError struct {
	// Name is the absolute name that was being looked up.
	Name string
	// Failures holds one entry per server asked, in order.
	Failures []DNSFailure
}

// DNSFailure is how one server failed.
type DNSFailure struct {
	Server string // HOST:PORT
	// Rcode is the server's response code (dns.RcodeServerFailure,
	// dns.RcodeRefused, ...), or -1 when no answer came; Err then says why.
	Rcode int
	Err   error
}

func (f DNSFailure) String() string {
	var what string
	switch {
	case f.Rcode >= 0:
		what = dns.RcodeToString[f.Rcode]
		if what == "" {
			what = "rcode " + strconv.Itoa(f.Rcode)
		}
	case isTimeout(f.Err):
		what = "timeout"
	default:
		what = fmt.Sprintf("error (%v)", f.Err)
	}
	return what + " from " + f.Server
}

func (e *DNSUnhealthyError) Error() string {
	parts := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		parts[i] = f.String()
	}
	return "DNS unhealthy: " + strings.Join(parts, ", ") + " for " + e.Name
}

// Unwrap gives the network errors behind the failures, if any.
func (e *DNSUnhealthyError) Unwrap() []error {
	var errs []error
	for _, f := range e.Failures {
		if f.Err != nil {
			errs = append(errs, f.Err)
		}
	}
	return errs
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// Lookup resolves name: A and AAAA records, or SRV records when its first
// label starts with "_". It tries Candidates(name) in order, each on the
// servers in order; the first candidate with records is the answer.
//
// Errors: one matching ErrNoRecords when every candidate was NXDOMAIN or
// NODATA; a *DNSUnhealthyError when some candidate got no usable answer from
// any server and none had records (a missing name cannot be told from a broken
// DNS then); ctx's error when ctx ended; another error for a malformed name.
// A server that timed out or was unreachable is not asked again within the
// same Lookup, so a dead DNS costs one timeout per server, not per candidate.
// If A records come but the AAAA query fails, the answer holds the A records.
func (r *Resolver) Lookup(ctx context.Context, name string) (Answer, error) {
	cands := r.Candidates(name)
	if len(cands) == 0 {
		return Answer{}, fmt.Errorf("DNS name %q: not a valid name", name)
	}
	srv := strings.HasPrefix(name, "_")
	down := make([]bool, len(r.servers))
	var misses []dnsMiss
	var sick *DNSUnhealthyError
	for _, fqdn := range cands {
		if !slices.Contains(down, false) {
			break // every server is gone; sick says so
		}
		ans, miss, err := r.resolve(ctx, fqdn, srv, down)
		var ue *DNSUnhealthyError
		switch {
		case err == nil && miss == nil:
			return ans, nil
		case miss != nil:
			misses = append(misses, *miss)
		case errors.As(err, &ue):
			if sick == nil {
				sick = ue
			}
		default:
			return Answer{}, err
		}
	}
	if sick != nil {
		return Answer{}, sick
	}
	return Answer{}, &noRecordsError{misses: misses}
}

// resolve asks the servers not yet down for fqdn until one answers, with
// records (an Answer) or without (a miss).
func (r *Resolver) resolve(ctx context.Context, fqdn string, srv bool, down []bool) (Answer, *dnsMiss, error) {
	var fails []DNSFailure
	for i, server := range r.servers {
		if down[i] {
			continue
		}
		ans, miss, fail := r.resolveAt(ctx, server, fqdn, srv)
		if err := ctx.Err(); err != nil {
			return Answer{}, nil, fmt.Errorf("DNS lookup of %s: %w", fqdn, err)
		}
		if fail == nil {
			return ans, miss, nil
		}
		if fail.Rcode < 0 {
			down[i] = true
		}
		fails = append(fails, *fail)
	}
	return Answer{}, nil, &DNSUnhealthyError{Name: fqdn, Failures: fails}
}

// resolveAt looks fqdn up on one server.
func (r *Resolver) resolveAt(ctx context.Context, server, fqdn string, srv bool) (Answer, *dnsMiss, *DNSFailure) {
	if srv {
		resp, fail := r.exchange(ctx, server, fqdn, dns.TypeSRV)
		if fail != nil {
			return Answer{}, nil, fail
		}
		if resp.Rcode == dns.RcodeNameError {
			return Answer{}, &dnsMiss{name: fqdn, nxdomain: true}, nil
		}
		ans := Answer{FQDN: fqdn}
		owners := chain(fqdn, resp.Answer)
		targets := map[string]bool{}
		for _, rr := range resp.Answer {
			if s, ok := rr.(*dns.SRV); ok && owners[dns.CanonicalName(s.Hdr.Name)] && s.Target != "." {
				ans.SRV = append(ans.SRV, SRV{Target: s.Target, Port: s.Port, Priority: s.Priority, Weight: s.Weight})
				targets[dns.CanonicalName(s.Target)] = true
			}
		}
		if len(ans.SRV) == 0 {
			return Answer{}, &dnsMiss{name: fqdn, types: "SRV"}, nil
		}
		slices.SortFunc(ans.SRV, func(a, b SRV) int {
			return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(b.Weight, a.Weight),
				strings.Compare(a.Target, b.Target), cmp.Compare(a.Port, b.Port))
		})
		ans.SRV = slices.Compact(ans.SRV)
		ans.Addrs = addrs(targets, resp.Extra)
		return ans, nil, nil
	}

	resp, fail := r.exchange(ctx, server, fqdn, dns.TypeA)
	if fail != nil {
		return Answer{}, nil, fail
	}
	if resp.Rcode == dns.RcodeNameError {
		// The name does not exist for any type: no need to ask for AAAA.
		return Answer{}, &dnsMiss{name: fqdn, nxdomain: true}, nil
	}
	found := addrs(chain(fqdn, resp.Answer), resp.Answer)
	resp6, fail := r.exchange(ctx, server, fqdn, dns.TypeAAAA)
	if fail != nil {
		if len(found) == 0 {
			return Answer{}, nil, fail
		}
	} else if resp6.Rcode == dns.RcodeSuccess {
		all := append(slices.Clone(resp.Answer), resp6.Answer...)
		found = addrs(chain(fqdn, all), all)
	}
	if len(found) == 0 {
		return Answer{}, &dnsMiss{name: fqdn, types: "A/AAAA"}, nil
	}
	return Answer{FQDN: fqdn, Addrs: found}, nil, nil
}

// exchange sends one query, with EDNS0, over UDP and, when the answer is
// truncated, again over TCP. It returns the response when its rcode is
// NOERROR or NXDOMAIN, a failure otherwise.
func (r *Resolver) exchange(ctx context.Context, server, fqdn string, qtype uint16) (*dns.Msg, *DNSFailure) {
	m := new(dns.Msg)
	m.SetQuestion(fqdn, qtype)
	m.SetEdns0(ednsBufferSize, false)
	resp, err := r.attempt(ctx, "udp", server, m)
	if err == nil && resp.Truncated {
		resp, err = r.attempt(ctx, "tcp", server, m)
		if err != nil {
			err = fmt.Errorf("TCP retry of a truncated answer: %w", err)
		}
	}
	if err != nil {
		return nil, &DNSFailure{Server: server, Rcode: -1, Err: err}
	}
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return nil, &DNSFailure{Server: server, Rcode: resp.Rcode}
	}
	return resp, nil
}

// attempt is one query over one transport, bounded by the per-attempt timeout.
func (r *Resolver) attempt(ctx context.Context, network, server string, m *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c := dns.Client{Net: network, Timeout: r.timeout, UDPSize: ednsBufferSize}
	resp, _, err := c.ExchangeContext(ctx, m, server)
	if err != nil {
		return nil, err
	}
	// An answer may leave the question out (a FORMERR often does), but not
	// carry another one.
	q := m.Question[0]
	if !resp.Response || len(resp.Question) > 1 || len(resp.Question) == 1 &&
		(resp.Question[0].Qtype != q.Qtype || !strings.EqualFold(resp.Question[0].Name, q.Name)) {
		return nil, fmt.Errorf("answer does not match the question %s %s", q.Name, dns.TypeToString[q.Qtype])
	}
	return resp, nil
}

// chain returns the canonical names of qname and of every name it is a CNAME
// of, through the CNAME records in rrs.
func chain(qname string, rrs []dns.RR) map[string]bool {
	names := map[string]bool{dns.CanonicalName(qname): true}
	for grew := true; grew; {
		grew = false
		for _, rr := range rrs {
			c, ok := rr.(*dns.CNAME)
			if ok && names[dns.CanonicalName(c.Hdr.Name)] && !names[dns.CanonicalName(c.Target)] {
				names[dns.CanonicalName(c.Target)] = true
				grew = true
			}
		}
	}
	return names
}

// addrs collects the A and AAAA addresses in rrs owned by one of owners,
// sorted and without duplicates.
func addrs(owners map[string]bool, rrs []dns.RR) []netip.Addr {
	var out []netip.Addr
	for _, rr := range rrs {
		var ip net.IP
		switch rr := rr.(type) {
		case *dns.A:
			ip = rr.A
		case *dns.AAAA:
			ip = rr.AAAA
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok && owners[dns.CanonicalName(rr.Header().Name)] {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// check is one look at a dns: dependency: ready with what was found, waiting
// on NXDOMAIN or NODATA, unhealthy when DNS gave no usable answer.
func (r *Resolver) check(ctx context.Context, name string) Observation {
	ans, err := r.Lookup(ctx, name)
	var ue *DNSUnhealthyError
	switch {
	case err == nil:
		return ready("%s -> %s", ans.FQDN, ans.summary())
	case errors.As(err, &ue):
		return unhealthy("%s", ue.Error())
	case errors.Is(err, ErrNoRecords):
		return waiting("%v", err)
	case ctx.Err() != nil:
		return waiting("DNS lookup of %s cut short: %v", name, ctx.Err())
	default:
		return failed("%v", err) // a malformed name never resolves
	}
}

// summary lists what an answer found, the first few items only.
func (a Answer) summary() string {
	const show = 8
	var items []string
	for _, s := range a.SRV {
		items = append(items, s.Target+":"+strconv.Itoa(int(s.Port)))
	}
	if len(a.SRV) == 0 {
		for _, ip := range a.Addrs {
			items = append(items, ip.String())
		}
	}
	if len(items) > show {
		return fmt.Sprintf("%s and %d more", strings.Join(items[:show], ", "), len(items)-show)
	}
	return strings.Join(items, ", ")
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
