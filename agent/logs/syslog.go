package logs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// SyslogConfig is the syslog sink: RFC 5424 messages over TCP (or TLS),
// framed by octet counting (RFC 6587), so a multi-line record stays one
// message. The fields Send is given (ShipperConfig.Fields) are params of
// the message's structured-data element, after file, offset and id.
type SyslogConfig struct {
	Address  string
	TLS      *tls.Config
	Hostname string // HOSTNAME: the pod's name; default os.Hostname
	Facility int    // default 1 (user)
	// Confirm is how long the connection must stay up after the receiver's
	// kernel has acknowledged every byte before the batch counts as
	// delivered (plain syslog has no application ack); default 200ms.
	Confirm time.Duration
	Logger  *slog.Logger
}

// Syslog is the syslog sink.
type Syslog struct {
	cfg  SyslogConfig
	mu   sync.Mutex
	conn net.Conn
}

// NewSyslog checks cfg; it connects on the first Send.
func NewSyslog(cfg SyslogConfig) (*Syslog, error) {
	host, _, err := net.SplitHostPort(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("syslog: address %q: %w", cfg.Address, err)
	}
	if cfg.TLS != nil && cfg.TLS.ServerName == "" && !cfg.TLS.InsecureSkipVerify {
		// tls.Client verifies nothing without a name: it refuses to
		// connect. The address's host is the name, as for the forward sink.
		cfg.TLS = cfg.TLS.Clone()
		cfg.TLS.ServerName = host
	}
	if cfg.Facility == 0 {
		cfg.Facility = 1
	}
	if cfg.Facility < 0 || cfg.Facility > 23 {
		return nil, fmt.Errorf("syslog: facility %d (want 0 to 23)", cfg.Facility)
	}
	if cfg.Confirm <= 0 {
		cfg.Confirm = 200 * time.Millisecond
	}
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Syslog{cfg: cfg}, nil
}

// Send writes one message per record, then waits until the receiver's
// kernel has acknowledged every byte and the connection stayed up for the
// confirmation window. Anything else is an error, and the caller sends the
// batch again over a new connection: at least once, never silently lost
// to a connection that died.
func (s *Syslog) Send(ctx context.Context, tag string, fields map[string]string, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf bytes.Buffer
	now := time.Now()
	// The fields as SD-PARAMs, once: ` k="v"` for each.
	var params []byte
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		params = fmt.Appendf(params, ` %s="%s"`, k, sdEscape(fields[k]))
	}
	for _, r := range recs {
		msg := s.format(&r, tag, params, now)
		buf.WriteString(strconv.Itoa(len(msg)))
		buf.WriteByte(' ')
		buf.Write(msg)
	}
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetWriteDeadline(dl)
	} else {
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		return s.drop(fmt.Errorf("syslog: writing to %s: %w", s.cfg.Address, err))
	}
	if err := s.confirm(ctx, c); err != nil {
		return s.drop(err)
	}
	return nil
}

func (s *Syslog) connect(ctx context.Context) (net.Conn, error) {
	if s.conn != nil {
		return s.conn, nil
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", s.cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("syslog: %w", err)
	}
	if s.cfg.TLS != nil {
		tc := tls.Client(c, s.cfg.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("syslog: TLS with %s: %w", s.cfg.Address, err)
		}
		c = tc
	}
	s.conn = c
	return c, nil
}

func (s *Syslog) drop(err error) error {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	return err
}

// confirm waits until the socket's send queue is empty (SIOCOUTQ: every
// byte acknowledged by the receiver's kernel), then watches the connection
// for the confirmation window: a receiver that dies with our bytes unread
// resets or closes it.
func (s *Syslog) confirm(ctx context.Context, c net.Conn) error {
	raw := c
	if tc, ok := c.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return errors.New("syslog: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var queued int
		var qerr error
		if err := rc.Control(func(fd uintptr) { queued, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
			return err
		}
		if qerr != nil {
			return fmt.Errorf("syslog: send queue: %w", qerr)
		}
		if queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("syslog: %s has not acknowledged %d bytes in 30s", s.cfg.Address, queued)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Wait a millisecond by reading: a receiver that died closed or
		// reset the connection, and its bytes will never be acknowledged.
		if err := closedWithin(raw, time.Millisecond); err != nil {
			return fmt.Errorf("syslog: %s closed the connection with %d bytes not acknowledged: %w", s.cfg.Address, queued, err)
		}
	}
	if err := closedWithin(raw, s.cfg.Confirm); err != nil {
		return fmt.Errorf("syslog: %s closed the connection after the batch: %w", s.cfg.Address, err)
	}
	return nil
}

// closedWithin reads from c for d: the receiver sends nothing on a syslog
// connection, so a read that returns means it closed or reset it (the
// error), and a timeout that it is still there (nil).
func closedWithin(c net.Conn, d time.Duration) error {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		err = errors.New("unexpected data from the receiver")
	}
	return err
}

// Close closes the connection.
func (s *Syslog) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drop(nil)
}

// severities maps oslo.log's levels to syslog's.
var severities = map[string]int{"CRITICAL": 2, "ERROR": 3, "WARNING": 4, "INFO": 6, "DEBUG": 7, "AUDIT": 5, "TRACE": 7}

// format is one RFC 5424 message: PRI from the facility and the record's
// oslo level (info when it has none), the time it was read, HOSTNAME,
// APP-NAME the tag, PROCID the pid of oslo's header, structured data naming
// the file and the offset (so a receiver can drop the duplicates
// at-least-once can make) followed by params (the fields), and MSG with
// invalid UTF-8 escaped as \xNN.
func (s *Syslog) format(r *Record, tag string, params []byte, now time.Time) []byte {
	sev, procid := 6, "-"
	if h, ok := parseOslo(r.Data); ok {
		if v, ok := severities[string(h.levelName(r.Data))]; ok {
			sev = v
		}
		procid = string(r.Data[h.pid : h.level-1])
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "<%d>1 %s %s %s %s - [kolla@32473 file=\"%s\" offset=\"%d\" id=\"%d:%d:%s\"", s.cfg.Facility*8+sev,
		now.UTC().Format("2006-01-02T15:04:05.000000Z"), header(s.cfg.Hostname, 255), header(tag, 48), header(procid, 128),
		sdEscape(r.File.Path), r.End, r.File.Dev, r.File.Ino, r.File.First)
	if r.Partial {
		b.WriteString(` partial="true"`)
	}
	b.Write(params)
	b.WriteString("] ")
	for d := r.Data; len(d) > 0; {
		c, n := utf8.DecodeRune(d)
		if c == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, d[0])
		} else {
			b.Write(d[:n])
		}
		d = d[n:]
	}
	return b.Bytes()
}

// header makes s a header field: printable US-ASCII without spaces, at
// most n characters, "-" when empty.
func header(s string, n int) string {
	out := make([]byte, 0, min(len(s), n))
	for i := 0; i < len(s) && len(out) < n; i++ {
		if c := s[i]; c > 32 && c < 127 {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return string(out)
}

// sdEscape escapes a structured-data value: '"', '\' and ']'.
func sdEscape(s string) string {
	var b bytes.Buffer
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' || c == ']' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
