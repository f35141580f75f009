package logs

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/certs"
)

// SinkConfig is where the shipper sends records: agent.yaml's logs.sink,
// its paths already as this host sees them.
type SinkConfig struct {
	Type    string // forward, syslog, or stdout (anything else)
	Address string // host:port (forward, syslog)
	// JSON: stdout writes one JSON object a line, else text.
	JSON bool
	// SharedKey, or SharedKeyFile holding it (a mounted Secret), enables
	// the forward handshake.
	SharedKey, SharedKeyFile string
	TLS                      *SinkTLS // nil: plain TCP
	AckTimeout               time.Duration
	// Hostname names the sender (the pod): forward's HELO, syslog's HOSTNAME.
	Hostname string
	Stdout   io.Writer // stdout's; nil: os.Stdout
	Logger   *slog.Logger
	// OnHealth is told the forward connection's outages (err) and
	// recoveries (nil): a Send retries inside until the ack.
	OnHealth func(err error)
}

// SinkTLS is a sink's TLS: the CA bundle to trust (none: the system's),
// the name to check (none: the address's host).
type SinkTLS struct {
	CAFile             string
	ServerName         string
	InsecureSkipVerify bool
}

// SinkError is a sink that cannot be built, with the field of logs.sink at
// fault ("" for the sink as a whole, "tls", "sharedKeyFile").
type SinkError struct {
	Field string
	Err   error
}

func (e *SinkError) Error() string { return e.Path("sink") + ": " + e.Err.Error() }

// Path is the field's path under sink, the sink's own path.
func (e *SinkError) Path(sink string) string {
	if e.Field == "" {
		return sink
	}
	return sink + "." + e.Field
}
func (e *SinkError) Unwrap() error { return e.Err }

// NewSink builds the sink cfg names, and what to close when the shipper is
// done with it (nil: nothing). What the config names but cannot be opened
// (a CA file, the key's file) is an error now, before the service starts,
// not a duty failing later.
func NewSink(cfg SinkConfig) (Sink, io.Closer, error) {
	tlsConf, err := sinkTLS(cfg)
	if err != nil {
		return nil, nil, &SinkError{Field: "tls", Err: err}
	}
	switch cfg.Type {
	case "forward":
		key := cfg.SharedKey
		if cfg.SharedKeyFile != "" {
			b, err := os.ReadFile(cfg.SharedKeyFile)
			if err != nil {
				return nil, nil, &SinkError{Field: "sharedKeyFile", Err: err}
			}
			if key = strings.TrimRight(string(b), "\r\n"); key == "" {
				return nil, nil, &SinkError{Field: "sharedKeyFile", Err: fmt.Errorf("%s is empty", cfg.SharedKeyFile)}
			}
		}
		f, err := NewForward(ForwardConfig{Address: cfg.Address, SharedKey: key, SelfHostname: cfg.Hostname, TLS: tlsConf, AckTimeout: cfg.AckTimeout, Logger: cfg.Logger, OnHealth: cfg.OnHealth})
		if err != nil {
			return nil, nil, &SinkError{Err: err}
		}
		return &ForwardSink{F: f}, f, nil
	case "syslog":
		sl, err := NewSyslog(SyslogConfig{Address: cfg.Address, TLS: tlsConf, Hostname: cfg.Hostname, Logger: cfg.Logger})
		if err != nil {
			return nil, nil, &SinkError{Err: err}
		}
		return sl, sl, nil
	}
	w := cfg.Stdout
	if w == nil {
		w = os.Stdout
	}
	return NewStdout(w, cfg.JSON), nil, nil
}

// sinkTLS is the sink's TLS config; nil for plain TCP. The name checked is
// ServerName, else the address's host, as a browser checks the URL's: a
// client that sets none cannot verify at all.
func sinkTLS(cfg SinkConfig) (*tls.Config, error) {
	if cfg.TLS == nil {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.TLS.InsecureSkipVerify, ServerName: cfg.TLS.ServerName}
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(cfg.Address) // validated with the config
	}
	if cfg.TLS.CAFile != "" {
		pool, err := certs.Pool(cfg.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("caFile: %w", err)
		}
		c.RootCAs = pool
	}
	return c, nil
}
