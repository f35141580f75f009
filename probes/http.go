package probes

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/certs"
	"github.com/kolla-agent/kolla-agent/redact"
)

// HTTPConfig configures an HTTP check.
type HTTPConfig struct {
	URL string
	// ExpectStatus lists the statuses that pass; empty means any 2xx or 3xx
	// (the kubelet's rule).
	ExpectStatus []int
	// BodyRegex, if set, must match the first httpBodyLimit bytes of the body.
	BodyRegex string
	// Host overrides the Host header, and the TLS server name with it.
	Host string
	// CAFile is a PEM bundle that replaces the system roots for https.
	CAFile             string
	InsecureSkipVerify bool
}

// httpBodyLimit bounds how much of a body is read: a probe must not be made
// slow or large by a big answer.
const httpBodyLimit = 64 << 10

// HTTPCheck GETs a URL once per look. Unlike discovery's waits it never
// retries (one look is one attempt; the scheduler's thresholds do the rest)
// and never follows redirects: a 3xx is the answer, as for the kubelet.
type HTTPCheck struct {
	url    string
	host   string
	expect []int
	body   *regexp.Regexp
	client *http.Client // one per check so its keep-alive connection is reused
}

// NewHTTP validates cfg and returns the check. The CA file is read here, so a
// bad file is a configuration error rather than a failing probe.
func NewHTTP(cfg HTTPConfig) (*HTTPCheck, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("http check: url %q: %s", redact.URL(cfg.URL), redact.ParseError(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http check: url %q: want http://HOST[:PORT]/... or https://...", redact.URL(cfg.URL))
	}
	for _, s := range cfg.ExpectStatus {
		if s < 100 || s > 599 {
			return nil, fmt.Errorf("http check %s: expectStatus %d is not an HTTP status", cfg.URL, s)
		}
	}
	c := &HTTPCheck{url: u.String(), host: cfg.Host, expect: append([]int(nil), cfg.ExpectStatus...)}
	if cfg.BodyRegex != "" {
		if c.body, err = regexp.Compile(cfg.BodyRegex); err != nil {
			return nil, fmt.Errorf("http check %s: bodyRegex: %w", cfg.URL, err)
		}
	}
	tlsConf := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify}
	if cfg.CAFile != "" {
		pool, err := certs.Pool(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("http check %s: caFile: %w", cfg.URL, err)
		}
		tlsConf.RootCAs = pool
	}
	if cfg.Host != "" {
		// The certificate of a virtual host is issued for that name, not for
		// the address dialled (often 127.0.0.1).
		name := cfg.Host
		if h, _, err := net.SplitHostPort(name); err == nil {
			name = h
		}
		tlsConf.ServerName = name
	}
	c.client = &http.Client{
		Transport: &http.Transport{
			// Proxy is left nil: a probe looks at this pod, as the kubelet
			// does, whatever HTTP_PROXY the environment sets. Every wait
			// (dial, TLS handshake, headers, body) is bounded by the look's
			// context, so the transport has no timeouts of its own.
			DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     tlsConf,
			MaxIdleConns:        1,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// Check implements Checker.
func (c *HTTPCheck) Check(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", c.url, err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	req.Header.Set("User-Agent", "kolla-agent-probe")
	resp, err := c.client.Do(req)
	if err != nil {
		return "", err // url.Error: `Get "URL": reason`
	}
	defer resp.Body.Close()
	// Read (at most the limit) even when the body is not examined, so that
	// the connection can be reused by the next look.
	body, err := io.ReadAll(io.LimitReader(resp.Body, httpBodyLimit))
	if !c.statusOK(resp.StatusCode) {
		return "", fmt.Errorf("HTTP %d from %s (want %s)", resp.StatusCode, c.url, c.wantStatus())
	}
	if c.body != nil {
		if err != nil {
			return "", fmt.Errorf("HTTP %d from %s: reading body: %w", resp.StatusCode, c.url, err)
		}
		if !c.body.Match(body) {
			return "", fmt.Errorf("HTTP %d from %s: body does not match %q", resp.StatusCode, c.url, c.body.String())
		}
	}
	return fmt.Sprintf("HTTP %d", resp.StatusCode), nil
}

// Close implements Closer: it drops the idle keep-alive connection.
func (c *HTTPCheck) Close() error {
	c.client.CloseIdleConnections()
	return nil
}

func (c *HTTPCheck) statusOK(code int) bool {
	if len(c.expect) == 0 {
		return code >= 200 && code < 400
	}
	return slices.Contains(c.expect, code)
}

func (c *HTTPCheck) wantStatus() string {
	if len(c.expect) == 0 {
		return "2xx or 3xx"
	}
	s := make([]string, len(c.expect))
	for i, v := range c.expect {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}
