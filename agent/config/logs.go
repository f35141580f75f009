package config

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"time"
)

// Logs is the logs: section: tail the service's log files and ship every
// line to the logging sidecar, offsets committed after the sink's ack.
type Logs struct {
	Files []LogFiles `json:"files,omitempty"`
	Sink  LogSink    `json:"sink,omitempty"`
	// StateDir keeps the offsets, on the log volume.
	StateDir string `json:"stateDir,omitempty"`
	// Rescan is how often the globs are expanded again, beside the
	// directory watch; default 10s.
	Rescan string `json:"rescan,omitempty"`
	// MaxLineSize splits longer lines (never skipped); default 256 KiB.
	MaxLineSize int `json:"maxLineSize,omitempty"`
	// Drain bounds the last shipping pass when the agent stops, after the
	// service has: what it wrote last is shipped; default 5s. The pod's
	// terminationGracePeriodSeconds must cover run.grace plus this.
	Drain string `json:"drain,omitempty"`
	// Multiline groups a record's lines: oslo.log's tracebacks (lines with
	// the same header) and unprefixed continuation lines by default.
	Multiline Multiline `json:"multiline,omitempty"`
}

// LogFiles is one logs.files entry.
type LogFiles struct {
	Path    string   `json:"path"`              // a glob
	Exclude []string `json:"exclude,omitempty"` // globs of base names
	Tag     string   `json:"tag,omitempty"`     // default kolla.<dir>.<file>
}

// LogSink is logs.sink.
type LogSink struct {
	Type      string `json:"type,omitempty"` // forward | syslog | stdout
	Address   string `json:"address,omitempty"`
	SharedKey string `json:"sharedKey,omitempty"`
	TLS       *struct {
		CAFile             string `json:"caFile,omitempty"`
		InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
	} `json:"tls,omitempty"`
	// Format of the stdout sink: raw (the lines) or json (tagged records).
	Format string `json:"format,omitempty"`
	// AckTimeout bounds the wait for the receiver's ack (forward).
	AckTimeout string `json:"ackTimeout,omitempty"`
}

// Multiline is logs.multiline.
type Multiline struct {
	// FirstLine, when set, is a regular expression that starts a record;
	// other lines continue it. Default: oslo.log's grouping.
	FirstLine string `json:"firstLine,omitempty"`
	// Idle flushes a record that nothing followed for this long; default 1s.
	Idle string `json:"idle,omitempty"`
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

func (c *Config) validateLogs() error {
	l := c.Logs
	if l == nil {
		return nil
	}
	if len(l.Files) == 0 {
		return fmt.Errorf("logs.files: empty (the log files to ship, e.g. /var/log/kolla/keystone/*.log)")
	}
	for i, f := range l.Files {
		at := fmt.Sprintf("logs.files[%d]", i)
		switch {
		case f.Path == "":
			return fmt.Errorf("%s.path: empty", at)
		case !path.IsAbs(f.Path):
			return fmt.Errorf("%s.path: %q is not an absolute path", at, f.Path)
		case f.Tag != "" && !logTag.MatchString(f.Tag):
			return fmt.Errorf("%s.tag: %q (want letters, digits, '.', '-', '_')", at, f.Tag)
		}
		if _, err := path.Match(f.Path, "/"); err != nil {
			return fmt.Errorf("%s.path: %q: %v", at, f.Path, err)
		}
		for j, x := range f.Exclude {
			if _, err := path.Match(x, "a"); err != nil || x == "" {
				return fmt.Errorf("%s.exclude[%d]: %q is not a glob", at, j, x)
			}
		}
	}
	s := l.Sink
	switch s.Type {
	case "forward", "syslog":
		host, port, err := net.SplitHostPort(s.Address)
		if err != nil || host == "" {
			return fmt.Errorf("logs.sink.address: %q: want HOST:PORT", s.Address)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("logs.sink.address: %q: %q is not a port", s.Address, port)
		}
	case "stdout":
		if s.Address != "" || s.SharedKey != "" || s.TLS != nil {
			return fmt.Errorf("logs.sink: type stdout takes no address, sharedKey or tls")
		}
	case "":
		return fmt.Errorf("logs.sink.type: empty (want forward, syslog or stdout)")
	default:
		return fmt.Errorf("logs.sink.type: %q (want forward, syslog or stdout)", s.Type)
	}
	switch {
	case s.SharedKey != "" && s.Type != "forward":
		return fmt.Errorf("logs.sink.sharedKey: only for type forward")
	case s.Format != "" && s.Type != "stdout":
		return fmt.Errorf("logs.sink.format: only for type stdout")
	case s.Format != "" && s.Format != "raw" && s.Format != "json":
		return fmt.Errorf("logs.sink.format: %q (want raw or json)", s.Format)
	case s.TLS != nil && s.TLS.CAFile != "" && !path.IsAbs(s.TLS.CAFile):
		return fmt.Errorf("logs.sink.tls.caFile: %q is not an absolute path", s.TLS.CAFile)
	case s.TLS != nil && s.TLS.CAFile != "" && s.TLS.InsecureSkipVerify:
		return fmt.Errorf("logs.sink.tls: caFile and insecureSkipVerify exclude each other")
	}
	for _, d := range []struct{ field, v string }{{"logs.rescan", l.Rescan}, {"logs.drain", l.Drain}, {"logs.multiline.idle", l.Multiline.Idle}, {"logs.sink.ackTimeout", s.AckTimeout}} {
		if _, err := parseDuration(d.field, d.v); err != nil {
			return err
		}
	}
	switch {
	case l.StateDir != "" && !path.IsAbs(l.StateDir):
		return fmt.Errorf("logs.stateDir: %q is not an absolute path", l.StateDir)
	case l.MaxLineSize < 0 || (l.MaxLineSize > 0 && l.MaxLineSize < 1024):
		return fmt.Errorf("logs.maxLineSize: %d (want at least 1024 bytes)", l.MaxLineSize)
	case l.MaxLineSize > 64<<20:
		return fmt.Errorf("logs.maxLineSize: %d is more than 64 MiB", l.MaxLineSize)
	}
	if l.Multiline.FirstLine != "" {
		if _, err := regexp.Compile(l.Multiline.FirstLine); err != nil {
			return fmt.Errorf("logs.multiline.firstLine: %v", err)
		}
	}
	return nil
}

// RescanEvery is logs.rescan, defaulted.
func (l *Logs) RescanEvery() time.Duration { return durationOr(l.Rescan, DefaultLogsRescan) }

// IdleFlush is logs.multiline.idle, defaulted.
func (l *Logs) IdleFlush() time.Duration { return durationOr(l.Multiline.Idle, DefaultLogsIdle) }

// AckWait is logs.sink.ackTimeout, defaulted.
func (l *Logs) AckWait() time.Duration { return durationOr(l.Sink.AckTimeout, DefaultLogsAckTimeout) }

// DrainFor is logs.drain, defaulted.
func (l *Logs) DrainFor() time.Duration { return durationOr(l.Drain, DefaultLogsDrain) }

// StateDirOr is logs.stateDir, defaulted.
func (l *Logs) StateDirOr() string {
	if l.StateDir == "" {
		return DefaultLogsStateDir
	}
	return l.StateDir
}

// durationOr is a validated duration, or def when unset.
func durationOr(s string, def time.Duration) time.Duration {
	if d, err := parseDuration("", s); err == nil && d > 0 {
		return d
	}
	return def
}
