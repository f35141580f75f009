package config

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Logs is the logs: section: tail the service's log files and ship every
// line to the logging sidecar, offsets committed after the sink's ack.
type Logs struct {
	// Files are the log files to ship, by glob.
	Files []LogFiles `json:"files,omitempty"`
	// Sink is where the lines go: the logging sidecar, or stdout.
	Sink LogSink `json:"sink,omitempty"`
	// StateDir keeps the offsets, on the log volume.
	StateDir string `json:"stateDir,omitempty"`
	// Rescan is how often the globs are expanded again, beside the
	// directory watch; default 10s.
	Rescan Duration `json:"rescan,omitempty"`
	// MaxLineSize splits longer lines (never skipped); default 256 KiB.
	MaxLineSize int `json:"maxLineSize,omitempty"`
	// Drain bounds the last shipping pass when the agent stops, after the
	// service has: what it wrote last is shipped; default 5s. The pod's
	// terminationGracePeriodSeconds must cover run.grace plus this.
	Drain Duration `json:"drain,omitempty"`
	// Multiline groups a record's lines: oslo.log's tracebacks (lines with
	// the same header) and unprefixed continuation lines by default.
	Multiline Multiline `json:"multiline,omitempty"`
}

// LogFiles is one logs.files entry.
type LogFiles struct {
	// Path is a glob of absolute paths (/var/log/kolla/keystone/*.log).
	Path string `json:"path"`
	// Exclude lists globs of base names not to ship (*.gz).
	Exclude []string `json:"exclude,omitempty"`
	// Tag of the records; default kolla.<dir>.<file>.
	Tag string `json:"tag,omitempty"`
}

// LogSink is logs.sink.
type LogSink struct {
	// Type: forward (fluentd's forward protocol, acked), syslog (RFC 5424
	// over TCP) or stdout (the agent's own output).
	Type string `json:"type,omitempty"`
	// Address of the receiver, HOST:PORT (forward, syslog).
	Address string `json:"address,omitempty"`
	// SharedKey authenticates to a forward receiver that asks for it. It
	// sits in a ConfigMap: prefer sharedKeyFile.
	SharedKey string `json:"sharedKey,omitempty"`
	// SharedKeyFile is a file (a mounted Secret's key) holding the shared
	// key, absolute; its final line break is not part of the key.
	SharedKeyFile string `json:"sharedKeyFile,omitempty"`
	// TLS connects to the receiver over TLS.
	TLS *struct {
		// CAFile is the CA bundle that verifies the receiver, absolute.
		CAFile string `json:"caFile,omitempty"`
		// InsecureSkipVerify does not verify the receiver's certificate.
		InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
		// ServerName is the name the receiver's certificate must carry;
		// default the host of address.
		ServerName string `json:"serverName,omitempty"`
	} `json:"tls,omitempty"`
	// Format of the stdout sink: raw (the lines) or json (tagged records).
	Format string `json:"format,omitempty"`
	// AckTimeout bounds the wait for the receiver's ack (forward).
	AckTimeout Duration `json:"ackTimeout,omitempty"`
}

// Multiline is logs.multiline.
type Multiline struct {
	// FirstLine, when set, is a regular expression that starts a record;
	// other lines continue it. Default: oslo.log's grouping.
	FirstLine string `json:"firstLine,omitempty"`
	// Idle flushes a record that nothing followed for this long; default 1s.
	Idle Duration `json:"idle,omitempty"`
}

// Logs defaults.
const (
	DefaultLogsStateDir    = "/var/log/kolla/.kolla-agent"
	DefaultLogsRescan      = 10 * time.Second
	DefaultLogsMaxLineSize = 256 << 10
	DefaultLogsIdle        = time.Second
	DefaultLogsAckTimeout  = 30 * time.Second
	DefaultLogsDrain       = 5 * time.Second
)

var logTag = regexp.MustCompile(`^[A-Za-z0-9_][-A-Za-z0-9_.]*$`)

// sinkTypes are what logs.sink.type takes, sinkFormats logs.sink.format.
var (
	sinkTypes   = []string{"forward", "syslog", "stdout"}
	sinkFormats = []string{"raw", "json"}
)

func (c *Config) validateLogs(e *problems) {
	l := c.Logs
	if l == nil {
		return
	}
	if len(l.Files) == 0 {
		e.add("logs.files: empty (the log files to ship, e.g. /var/log/kolla/keystone/*.log)")
	}
	for i, f := range l.Files {
		at := fmt.Sprintf("logs.files[%d]", i)
		switch {
		case f.Path == "":
			e.add("%s.path: empty", at)
		case !path.IsAbs(f.Path):
			e.add("%s.path: %q is not an absolute path", at, f.Path)
		default:
			if _, err := path.Match(f.Path, "/"); err != nil {
				e.add("%s.path: %q: %v", at, f.Path, err)
			}
		}
		if f.Tag != "" && !logTag.MatchString(f.Tag) {
			e.add("%s.tag: %q (want letters, digits, '.', '-', '_')", at, f.Tag)
		}
		for j, x := range f.Exclude {
			if _, err := path.Match(x, "a"); err != nil || x == "" {
				e.add("%s.exclude[%d]: %q is not a glob", at, j, x)
			}
		}
	}
	s := l.Sink
	switch s.Type {
	case "forward", "syslog":
		host, port, err := net.SplitHostPort(s.Address)
		if err != nil || host == "" {
			e.add("logs.sink.address: %q: want HOST:PORT", s.Address)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			e.add("logs.sink.address: %q: %q is not a port", s.Address, port)
		}
	case "stdout":
		if s.Address != "" || s.SharedKey != "" || s.SharedKeyFile != "" || s.TLS != nil {
			e.add("logs.sink: type stdout takes no address, sharedKey, sharedKeyFile or tls")
		}
	case "":
		e.add("logs.sink.type: empty (want %s)", oneOf(sinkTypes))
	default:
		e.add("logs.sink.type: %q (want %s)", s.Type, oneOf(sinkTypes))
	}
	known := slices.Contains(sinkTypes, s.Type) // else what fits it is unknown
	if s.SharedKey != "" && known && s.Type != "forward" && s.Type != "stdout" {
		e.add("logs.sink.sharedKey: only for type forward")
	}
	if s.SharedKeyFile != "" {
		switch {
		case known && s.Type != "forward" && s.Type != "stdout":
			e.add("logs.sink.sharedKeyFile: only for type forward")
		case s.SharedKey != "":
			e.add("logs.sink: sharedKey and sharedKeyFile exclude each other")
		case !path.IsAbs(s.SharedKeyFile):
			e.add("logs.sink.sharedKeyFile: %q is not an absolute path", s.SharedKeyFile)
		}
	}
	switch {
	case s.Format != "" && known && s.Type != "stdout":
		e.add("logs.sink.format: only for type stdout")
	case s.Format != "" && !slices.Contains(sinkFormats, s.Format):
		e.add("logs.sink.format: %q (want %s)", s.Format, oneOf(sinkFormats))
	}
	if s.TLS != nil && s.TLS.CAFile != "" {
		if !path.IsAbs(s.TLS.CAFile) {
			e.add("logs.sink.tls.caFile: %q is not an absolute path", s.TLS.CAFile)
		}
		if s.TLS.InsecureSkipVerify {
			e.add("logs.sink.tls: caFile and insecureSkipVerify exclude each other")
		}
	}
	for _, d := range []struct {
		field string
		v     Duration
	}{{"logs.rescan", l.Rescan}, {"logs.drain", l.Drain}, {"logs.multiline.idle", l.Multiline.Idle}, {"logs.sink.ackTimeout", s.AckTimeout}} {
		_, err := d.v.check(d.field)
		e.addErr(err)
	}
	if l.StateDir != "" && !path.IsAbs(l.StateDir) {
		e.add("logs.stateDir: %q is not an absolute path", l.StateDir)
	}
	switch {
	case l.MaxLineSize < 0 || (l.MaxLineSize > 0 && l.MaxLineSize < 1024):
		e.add("logs.maxLineSize: %d (want at least 1024 bytes)", l.MaxLineSize)
	case l.MaxLineSize > 64<<20:
		e.add("logs.maxLineSize: %d is more than 64 MiB", l.MaxLineSize)
	}
	if l.Multiline.FirstLine != "" {
		if _, err := regexp.Compile(l.Multiline.FirstLine); err != nil {
			e.add("logs.multiline.firstLine: %v", err)
		}
	}
}

func (l *Logs) withDefaults() {
	l.Rescan.defaultZeroTo(DefaultLogsRescan)
	l.Drain.defaultZeroTo(DefaultLogsDrain)
	l.Multiline.Idle.defaultZeroTo(DefaultLogsIdle)
	l.Sink.AckTimeout.defaultZeroTo(DefaultLogsAckTimeout)
	if l.StateDir == "" {
		l.StateDir = DefaultLogsStateDir
	}
}
