package logs

import (
	"context"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// ErrAuth is wrapped by the errors of a rejected handshake: the server
// refused our shared key or user, its PONG did not prove that it knows the
// shared key, or it asked for a handshake while no SharedKey is configured.
// Send does not retry these.
var ErrAuth = errors.New("forward: handshake rejected")

// ErrClosed is returned by Send once Close was called.
var ErrClosed = errors.New("forward: closed")

var errAckTimeout = errors.New("forward: no ack within the ack timeout")

// Field is one key of a record, in order. Value is a string, []byte (sent as
// bin), int, int64, uint64, bool or nil.
type Field struct {
	Key   string
	Value any
}

// Entry is one event: its time (the zero time is sent as the time of the
// Send) and its record.
type Entry struct {
	Time   time.Time
	Fields []Field
}

// ForwardConfig configures a Forward.
type ForwardConfig struct {
	Address string // host:port

	// SharedKey, when not empty, enables the HELO/PING/PONG handshake.
	SharedKey string
	// SelfHostname is sent in PING; default os.Hostname().
	SelfHostname string
	// Username and Password are sent in PING when the server's HELO asks
	// for user authentication.
	Username, Password string

	TLS *tls.Config // nil: plain TCP

	AckTimeout  time.Duration // default 30s; also bounds the handshake and each write
	MaxInFlight int           // chunks awaiting their ack at once; default 4
	DialTimeout time.Duration // default 10s
	Logger      *slog.Logger
	// OnHealth, if set, is told of every failed attempt (err: why) and of
	// the first success after a failure (nil). Send itself keeps trying
	// until its context ends, so this is how a caller sees an outage.
	OnHealth func(err error)
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// maxServerMsg bounds one message from the server (an ack, HELO or
	// PONG is under 300 bytes).
	maxServerMsg = 64 << 10
)

// Forward is a Fluent forward protocol client (fluentd's in_forward,
// fluent-bit's forward input). It sends PackedForward messages with the
// chunk option over one connection and waits for each ack.
type Forward struct {
	cfg     ForwardConfig
	log     *slog.Logger
	slots   chan struct{} // one token per chunk in flight
	dialing chan struct{} // one dial at a time
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup

	mu      sync.Mutex
	cur     *fconn
	conns   map[*fconn]struct{}
	closed  bool
	failing bool // the last attempt failed (OnHealth)
	backoff time.Duration
	next    time.Time // no dial before this
}

// NewForward checks cfg and fills in its defaults; it does not connect: the
// first Send does.
func NewForward(cfg ForwardConfig) (*Forward, error) {
	host, _, err := net.SplitHostPort(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("forward: address %q: %w", cfg.Address, err)
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 30 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SelfHostname == "" {
		cfg.SelfHostname, _ = os.Hostname()
	}
	if cfg.TLS != nil && cfg.TLS.ServerName == "" {
		cfg.TLS = cfg.TLS.Clone()
		cfg.TLS.ServerName = host
	}
	return &Forward{
		cfg:     cfg,
		log:     cfg.Logger,
		slots:   make(chan struct{}, cfg.MaxInFlight),
		dialing: make(chan struct{}, 1),
		done:    make(chan struct{}),
		conns:   map[*fconn]struct{}{},
	}, nil
}

// Send ships entries of one tag as one PackedForward message,
// [tag, bin(entries), {"chunk": id, "size": len(entries)}], and returns once
// the server acked it. It is safe for concurrent use: up to MaxInFlight
// chunks are in flight at once over one connection.
//
// A connection error or an ack timeout closes the connection; the chunks in
// flight are sent again over a new connection (dialled with backoff, and
// with the handshake), so delivery is at least once. A chunk sent again
// keeps its chunk id. A chunk not acked twice in a row is split in two and
// the halves are sent one after the other (recursively, down to one entry):
// fluentd drops a message over its chunk_size_limit without a word, so an
// oversized batch must not be resent as it is forever.
//
// Send returns nil once every entry was acked, an error wrapping ErrAuth
// when the handshake is rejected, ErrClosed after Close, or the context's
// error (with the last connection error) when ctx ends first.
func (f *Forward) Send(ctx context.Context, tag string, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	now := time.Now()
	body := make([]byte, 0, 128*len(entries))
	offs := make([]int, 1, len(entries)+1)
	for _, e := range entries {
		t := e.Time
		if t.IsZero() {
			t = now
		}
		body = appendEventTime(append(body, 0x92), t)
		body = appendMap(body, len(e.Fields))
		for _, fl := range e.Fields {
			body = appendStr(body, fl.Key)
			switch v := fl.Value.(type) {
			case string:
				body = appendStr(body, v)
			case []byte:
				body = appendBin(body, v)
			case int64:
				body = appendInt(body, v)
			case int:
				body = appendInt(body, int64(v))
			case uint64:
				body = appendUint(body, v)
			case bool:
				body = appendBool(body, v)
			case nil:
				body = appendNil(body)
			default:
				return fmt.Errorf("forward: field %q: unsupported value type %T", fl.Key, v)
			}
		}
		offs = append(offs, len(body))
	}
	return f.send(ctx, tag, body, offs)
}

// send delivers the entries body[offs[0]:offs[len(offs)-1]], entry i being
// body[offs[i]:offs[i+1]].
func (f *Forward) send(ctx context.Context, tag string, body []byte, offs []int) error {
	n := len(offs) - 1
	p := body[offs[0]:offs[n]]
	var id [16]byte
	rand.Read(id[:])
	cid := base64.StdEncoding.EncodeToString(id[:])
	hdr := appendBinHeader(appendStr([]byte{0x93}, tag), len(p))
	opt := appendInt(appendStr(appendStr(appendStr([]byte{0x82}, "chunk"), cid), "size"), int64(n))
	for misses := 0; ; {
		missed, err := f.attempt(ctx, hdr, p, opt, cid)
		if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
			f.health(err)
		}
		if err == nil || ctx.Err() != nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrClosed) {
			return err
		}
		if missed {
			misses++
		}
		if misses >= 2 && n > 1 {
			f.note(slog.LevelWarn, "chunk not acked twice: split in two", nil, "entries", n)
			if err := f.send(ctx, tag, body, offs[:n/2+1]); err != nil {
				return err
			}
			return f.send(ctx, tag, body, offs[n/2:])
		}
	}
}

// attempt sends one message and waits for its ack. missed says the message
// went out and no ack came for it: its own ack timed out or the connection
// broke under it (not because another chunk's ack timed out).
func (f *Forward) attempt(ctx context.Context, hdr, body, opt []byte, id string) (missed bool, err error) {
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-f.done:
		return false, ErrClosed
	}
	defer func() { <-f.slots }()
	c, err := f.conn(ctx)
	if err != nil {
		return false, err
	}
	acked := c.expect(id)
	defer c.forget(id)
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(f.cfg.AckTimeout))
	_, err = (&net.Buffers{hdr, body, opt}).WriteTo(c.nc)
	c.wmu.Unlock()
	if err != nil {
		c.close(f.fail("write to", err))
		return true, err
	}
	t := time.NewTimer(f.cfg.AckTimeout)
	defer t.Stop()
	select {
	case <-acked:
	case <-c.done:
	case <-t.C:
	case <-ctx.Done():
	case <-f.done:
	}
	switch {
	case isClosed(acked): // an ack wins over what came with it
		return false, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case isClosed(f.done):
		return false, ErrClosed
	case isClosed(c.done):
		// A miss unless another chunk's ack timeout closed it.
		return !errors.Is(c.err, errAckTimeout), c.err
	}
	f.note(slog.LevelWarn, "no ack in time: reconnecting", nil, "bytes", len(body))
	c.close(errAckTimeout)
	return true, errAckTimeout
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// conn returns the connection to send on, dialling one when there is none
// (one dial at a time, after the backoff).
func (f *Forward) conn(ctx context.Context) (*fconn, error) {
	var last error
	for {
		select {
		case f.dialing <- struct{}{}:
		case <-ctx.Done():
			return nil, ctxErr(ctx, last)
		case <-f.done:
			return nil, ErrClosed
		}
		c, err := f.pick(ctx)
		<-f.dialing
		if c != nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrClosed) {
			return c, err
		}
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, last)
		}
		f.health(err) // conn keeps dialling: say so now
		// A dial cut short by the context's own deadline says nothing
		// new: keep the error that says why the earlier ones failed.
		var ne net.Error
		if last == nil || !errors.As(err, &ne) || !ne.Timeout() {
			last = err
		}
	}
}

func ctxErr(ctx context.Context, last error) error {
	if last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
}

// pick returns the open connection, or dials a new one once the backoff
// allows; the caller holds the dial token.
func (f *Forward) pick(ctx context.Context) (*fconn, error) {
	f.mu.Lock()
	c, closed, wait := f.cur, f.closed, time.Until(f.next)
	if c != nil && !c.used && !isClosed(c.done) {
		c.used = !c.keepalive // a server without keepalive takes one message per connection
		f.mu.Unlock()
		return c, nil
	}
	f.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.done:
			return nil, ErrClosed
		}
	}
	c, err := f.dial(ctx)
	if err != nil {
		f.mu.Lock()
		f.bumpLocked()
		retry := f.backoff
		f.mu.Unlock()
		f.note(slog.LevelWarn, "cannot connect", err, "backoffms", int(retry/time.Millisecond))
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.nc.Close()
		return nil, ErrClosed
	}
	f.cur = c
	f.conns[c] = struct{}{}
	c.used = !c.keepalive
	f.wg.Add(1)
	go f.read(c)
	return c, nil
}

// health passes an attempt's outcome to OnHealth: every failure, and the
// first success after one.
func (f *Forward) health(err error) {
	if f.cfg.OnHealth == nil {
		return
	}
	f.mu.Lock()
	was := f.failing
	f.failing = err != nil
	f.mu.Unlock()
	if err != nil || was {
		f.cfg.OnHealth(err)
	}
}

func (f *Forward) bumpLocked() {
	f.backoff = min(max(2*f.backoff, minBackoff), maxBackoff)
	f.next = time.Now().Add(f.backoff/2 + mrand.N(f.backoff/2))
}

// note logs msg with the server's address, err and k=v.
func (f *Forward) note(lvl slog.Level, msg string, err error, k string, v int) {
	f.log.Log(context.Background(), lvl, "forward: "+msg, "address", f.cfg.Address, "err", err, k, v)
}

// fail says what failed with the server's address.
func (f *Forward) fail(what string, err error) error {
	return fmt.Errorf("forward: %s %s: %w", what, f.cfg.Address, err)
}

// authErr is a rejected handshake, for why.
func (f *Forward) authErr(why string) error {
	return fmt.Errorf("%w by %s: %s", ErrAuth, f.cfg.Address, why)
}

// dial connects, does the TLS handshake and the forward handshake.
func (f *Forward) dial(ctx context.Context) (*fconn, error) {
	d := net.Dialer{Timeout: f.cfg.DialTimeout}
	nc, err := d.DialContext(ctx, "tcp", f.cfg.Address)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(f.cfg.AckTimeout))
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	if f.cfg.TLS != nil {
		tc := tls.Client(nc, f.cfg.TLS)
		err = tc.Handshake()
		nc = tc
	}
	c := &fconn{nc: nc, keepalive: true, waiting: map[string]chan struct{}{}, done: make(chan struct{})}
	c.r = msgReader{r: nc, max: maxServerMsg}
	if err == nil && f.cfg.SharedKey != "" {
		err = f.handshake(c)
	}
	if !stop() && !errors.Is(err, ErrAuth) {
		err = ctx.Err()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

// handshake does the shared-key handshake of the forward protocol v1:
//
//	server: ["HELO", {"nonce": nonce, "auth": auth_salt, "keepalive": bool}]
//	client: ["PING", self_hostname, salt, hex(sha512(salt+self_hostname+nonce+shared_key)),
//	         username, hex(sha512(auth_salt+username+password))]
//	server: ["PONG", ok, reason, server_hostname, hex(sha512(salt+server_hostname+nonce+shared_key))]
//
// nonce and auth_salt come as bin from fluentd and as str from fluent-bit;
// both are used as their bytes. Username and password digest are empty
// strings when auth_salt is empty (no user authentication).
func (f *Forward) handshake(c *fconn) error {
	v, err := c.r.next()
	a, _ := v.([]any)
	var opts map[string]any
	if len(a) == 2 && a[0] == "HELO" {
		opts, _ = a[1].(map[string]any)
	}
	nonce, ok := raw(opts["nonce"])
	if err == nil && !ok {
		err = errors.New("no HELO with a nonce")
	}
	if err != nil {
		return f.fail("handshake with", err)
	}
	auth, _ := raw(opts["auth"])
	if k, ok := opts["keepalive"].(bool); ok {
		c.keepalive = k
	}
	var s [16]byte
	rand.Read(s[:])
	salt := hex.EncodeToString(s[:])
	key, host, user, pw := f.cfg.SharedKey, f.cfg.SelfHostname, "", ""
	if auth != "" {
		user, pw = f.cfg.Username, hexSHA512(auth, f.cfg.Username, f.cfg.Password)
	}
	b := []byte{0x96}
	for _, s := range []string{"PING", host, salt, hexSHA512(salt, host, nonce, key), user, pw} {
		b = appendStr(b, s)
	}
	if _, err = c.nc.Write(b); err == nil {
		v, err = c.r.next()
	}
	if a, _ = v.([]any); err == nil && (len(a) != 5 || a[0] != "PONG") {
		err = errors.New("no PONG")
	}
	if err != nil {
		return f.fail("handshake with", err)
	}
	reason, _ := raw(a[2])
	if ok, _ := a[1].(bool); !ok {
		return f.authErr("the server's reason: " + reason)
	}
	server, _ := raw(a[3])
	got, _ := raw(a[4])
	if subtle.ConstantTimeCompare([]byte(got), []byte(hexSHA512(salt, server, nonce, key))) != 1 {
		return f.authErr("the PONG digest does not match: the server does not know our shared key")
	}
	return nil
}

func raw(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

func hexSHA512(parts ...string) string {
	h := sha512.New()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// read reads what the server sends on c (acks) until c breaks or is closed.
func (f *Forward) read(c *fconn) {
	defer f.wg.Done()
	var err error
	for err == nil {
		var v any
		if v, err = c.r.next(); err != nil {
			err = f.fail("connection to", err)
			break
		}
		m, _ := v.(map[string]any)
		if id, ok := raw(m["ack"]); ok {
			if c.ack(id) {
				f.mu.Lock()
				f.backoff, f.next = 0, time.Time{}
				f.mu.Unlock()
			}
		} else if a, _ := v.([]any); len(a) > 0 && a[0] == "HELO" {
			err = f.authErr("it sent HELO: it wants the shared-key handshake and no shared key is configured")
		}
	}
	c.close(err)
	c.mu.Lock()
	acks, inflight := c.acks, len(c.waiting)
	c.mu.Unlock()
	f.mu.Lock()
	delete(f.conns, c)
	if f.cur == c {
		f.cur = nil
	}
	closed := f.closed
	if acks == 0 && !closed {
		f.bumpLocked()
	}
	f.mu.Unlock()
	if inflight > 0 && !closed && !errors.Is(c.err, errAckTimeout) {
		f.note(slog.LevelWarn, "connection lost", c.err, "inflight", inflight)
	}
}

// Close closes the connections; Sends in progress return ErrClosed.
func (f *Forward) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.done)
	for c := range f.conns {
		c.close(ErrClosed)
	}
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// fconn is one connection to the server.
type fconn struct {
	nc        net.Conn
	r         msgReader
	keepalive bool // false: the server closes after one response, so one message per connection
	used      bool // guarded by Forward.mu

	wmu sync.Mutex // one message written at a time

	mu      sync.Mutex
	waiting map[string]chan struct{} // by chunk id; closed on its ack
	acks    int
	err     error         // why it closed; set before done is closed
	done    chan struct{} // closed when the connection is closed
}

func (c *fconn) expect(id string) chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	return ch
}

func (c *fconn) forget(id string) {
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

// ack marks the chunk acked and says whether it is the connection's first.
func (c *fconn) ack(id string) bool {
	c.mu.Lock()
	ch := c.waiting[id]
	delete(c.waiting, id)
	c.acks++
	first := c.acks == 1
	c.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	return first
}

func (c *fconn) close(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
		c.nc.Close()
	}
}
