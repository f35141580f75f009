package forwardserver

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests talk to the server with a tiny forward client written here, so
// that they show the server speaks the protocol without relying on the
// agent's encoder. Only the msgpack the tests need is encoded and decoded.

const (
	ioTimeout  = 5 * time.Second
	clientHost = "forwardserver-test-client" // must differ from the server's hostname
)

// enc appends msgpack to b.
type enc struct{ b []byte }

func (e *enc) array(n int) {
	if n < 16 {
		e.b = append(e.b, 0x90|byte(n))
		return
	}
	e.b = append(e.b, 0xdc)
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
}

func (e *enc) mapHeader(n int) { e.b = append(e.b, 0x80|byte(n)) } // n < 16

func (e *enc) str(s string) {
	switch {
	case len(s) < 32:
		e.b = append(e.b, 0xa0|byte(len(s)))
	case len(s) < 256:
		e.b = append(e.b, 0xd9, byte(len(s)))
	case len(s) < 1<<16:
		e.b = append(e.b, 0xda)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(s)))
	default:
		e.b = append(e.b, 0xdb)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(s)))
	}
	e.b = append(e.b, s...)
}

func (e *enc) bin(p []byte) {
	if len(p) < 256 {
		e.b = append(e.b, 0xc4, byte(len(p)))
	} else {
		e.b = append(e.b, 0xc5)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(p)))
	}
	e.b = append(e.b, p...)
}

func (e *enc) uint32(n uint32) {
	e.b = append(e.b, 0xce)
	e.b = binary.BigEndian.AppendUint32(e.b, n)
}

// eventTime is EventTime: fixext 8 (0xd7) of ext type 0, uint32 seconds and
// uint32 nanoseconds, big-endian.
func (e *enc) eventTime(t time.Time) {
	e.b = append(e.b, 0xd7, 0x00)
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(t.Unix()))
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(t.Nanosecond()))
}

// entry encodes [EventTime, {"message": msg}], plus a "raw" bin field when
// raw is not nil.
func (e *enc) entry(t time.Time, msg string, raw []byte) {
	e.array(2)
	e.eventTime(t)
	if raw == nil {
		e.mapHeader(1)
	} else {
		e.mapHeader(2)
		e.str("raw")
		e.bin(raw)
	}
	e.str("message")
	e.str(msg)
}

func (e *enc) chunkOption(chunk string) {
	e.mapHeader(1)
	e.str("chunk")
	e.str(chunk)
}

// forward is a Forward mode message: [tag, [[time, {"message": msg}], ...], {"chunk": chunk}].
func forward(tag, chunk string, t time.Time, msgs ...string) []byte {
	var e enc
	e.array(3)
	e.str(tag)
	e.array(len(msgs))
	for _, m := range msgs {
		e.entry(t, m, nil)
	}
	e.chunkOption(chunk)
	return e.b
}

// dec reads msgpack values from a stream: the subset the server sends.
type dec struct{ r *bufio.Reader }

func (d dec) n(size int) (int, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(b[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(b)), nil
	default:
		return int(binary.BigEndian.Uint32(b)), nil
	}
}

func (d dec) bytes(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(d.r, b)
	return b, err
}

// value returns nil, bool, int64, string (str), []byte (bin), []any or
// map[string]any.
func (d dec) value() (any, error) {
	c, err := d.r.ReadByte()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c&0xf0 == 0x80:
		return d.mapOf(int(c & 0x0f))
	case c&0xf0 == 0x90:
		return d.arrayOf(int(c & 0x0f))
	case c&0xe0 == 0xa0:
		b, err := d.bytes(int(c & 0x1f))
		return string(b), err
	case c == 0xc0:
		return nil, nil
	case c == 0xc2, c == 0xc3:
		return c == 0xc3, nil
	case c == 0xc4, c == 0xc5, c == 0xc6:
		if n, err = d.n(1 << (c - 0xc4)); err != nil {
			return nil, err
		}
		return d.bytes(n)
	case c == 0xd9, c == 0xda, c == 0xdb:
		if n, err = d.n(1 << (c - 0xd9)); err != nil {
			return nil, err
		}
		b, err := d.bytes(n)
		return string(b), err
	case c == 0xdc:
		if n, err = d.n(2); err != nil {
			return nil, err
		}
		return d.arrayOf(n)
	case c == 0xde:
		if n, err = d.n(2); err != nil {
			return nil, err
		}
		return d.mapOf(n)
	}
	return nil, fmt.Errorf("msgpack type byte %#x not handled by the test decoder", c)
}

func (d dec) arrayOf(n int) ([]any, error) {
	a := make([]any, n)
	for i := range a {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		a[i] = v
	}
	return a, nil
}

func (d dec) mapOf(n int) (map[string]any, error) {
	m := make(map[string]any, n)
	for range n {
		k, err := d.value()
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("map key %#v is not a str", k)
		}
		if m[ks], err = d.value(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

type client struct {
	conn net.Conn
	d    dec
}

func dial(t *testing.T, addr string, tlsConf *tls.Config) *client {
	t.Helper()
	var conn net.Conn
	var err error
	if tlsConf != nil {
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", addr, tlsConf)
	} else {
		conn, err = net.DialTimeout("tcp", addr, ioTimeout)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{conn: conn, d: dec{bufio.NewReader(conn)}}
}

func (c *client) send(t *testing.T, b []byte) {
	t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (c *client) read() (any, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(ioTimeout))
	return c.d.value()
}

// readAck reads {"ack": chunk}: a fixmap of one, fixstr "ack", str chunk.
func (c *client) readAck(t *testing.T) string {
	t.Helper()
	v, err := c.read()
	if err != nil {
		t.Fatalf("reading the ack: %v", err)
	}
	m, ok := v.(map[string]any)
	ack, isStr := m["ack"].(string)
	if !ok || len(m) != 1 || !isStr {
		t.Fatalf("ack = %#v, want {\"ack\": str}", v)
	}
	return ack
}

// readClosed checks that the server closed the connection.
func (c *client) readClosed(t *testing.T) {
	t.Helper()
	v, err := c.read()
	if err == nil {
		t.Fatalf("got %#v, want the connection closed", v)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want the connection closed", err)
	}
}

func newChunk(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func sharedKeyDigest(salt, hostname string, nonce []byte, key string) string {
	h := sha512.New()
	h.Write([]byte(salt))
	h.Write([]byte(hostname))
	h.Write(nonce)
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// handshake does HELO, PING, PONG with key and returns the PONG. It checks
// the HELO's shape: nonce 16 bytes of bin, auth "" as str (no user
// authentication), keepalive true.
func (c *client) handshake(t *testing.T, key string) []any {
	t.Helper()
	v, err := c.read()
	if err != nil {
		t.Fatalf("reading HELO: %v", err)
	}
	helo, ok := v.([]any)
	if !ok || len(helo) != 2 || helo[0] != "HELO" {
		t.Fatalf("HELO = %#v", v)
	}
	opts, _ := helo[1].(map[string]any)
	nonce, ok := opts["nonce"].([]byte)
	if !ok || len(nonce) != 16 {
		t.Fatalf("HELO nonce = %#v, want 16 bytes of bin", opts["nonce"])
	}
	if auth, ok := opts["auth"].(string); !ok || auth != "" {
		t.Fatalf("HELO auth = %#v, want the empty str", opts["auth"])
	}
	if opts["keepalive"] != true {
		t.Fatalf("HELO keepalive = %#v, want true", opts["keepalive"])
	}
	salt := newChunk(t) // any str will do
	var e enc
	e.array(6)
	e.str("PING")
	e.str(clientHost)
	e.str(salt)
	e.str(sharedKeyDigest(salt, clientHost, nonce, key))
	e.str("") // username
	e.str("") // password digest
	c.send(t, e.b)
	v, err = c.read()
	if err != nil {
		t.Fatalf("reading PONG: %v", err)
	}
	pong, ok := v.([]any)
	if !ok || len(pong) != 5 || pong[0] != "PONG" {
		t.Fatalf("PONG = %#v", v)
	}
	if pong[1] == true {
		host, _ := pong[3].(string)
		if want := sharedKeyDigest(salt, host, nonce, key); pong[4] != want {
			t.Fatalf("PONG digest = %#v, want sha512_hex(salt + server_hostname + nonce + shared_key) = %s", pong[4], want)
		}
	}
	return pong
}

// sendOne sends a Forward message of one entry and checks its ack and its
// record.
func sendOne(t *testing.T, s *Server, c *client, msg string) {
	t.Helper()
	chunk := newChunk(t)
	ts := time.Unix(1_700_000_000, 123_456_789)
	c.send(t, forward("test.forward", chunk, ts, msg))
	if got := c.readAck(t); got != chunk {
		t.Fatalf("ack %q, want chunk %q", got, chunk)
	}
	// No polling: the entry is written before the ack is sent.
	recs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Chunk == chunk {
			want := Record{Tag: "test.forward", Time: ts, EventTime: true, Fields: map[string]any{"message": msg}, Chunk: chunk, Mode: "Forward"}
			if !r.Time.Equal(want.Time) {
				t.Errorf("record time %v, want %v", r.Time, want.Time)
			}
			r.Time = want.Time
			if !reflect.DeepEqual(r, want) {
				t.Errorf("record %+v, want %+v", r, want)
			}
			return
		}
	}
	t.Fatalf("acked chunk %s not among the %d records", chunk, len(recs))
}

func TestPlain(t *testing.T) {
	start := time.Now()
	s := Start(t, Options{})
	t.Logf("server up on %s in %v", s.Addr(), time.Since(start))
	c := dial(t, s.Addr(), nil)
	sendOne(t, s, c, "hi")

	// PackedForward: the entries as one bin, one of them with a bin field
	// that is not UTF-8.
	var entries enc
	ts := time.Unix(1_700_000_001, 5)
	entries.entry(ts, "packed 1", nil)
	entries.entry(ts, "packed 2", []byte{0xff, 0xfe, 0x00})
	chunk := newChunk(t)
	var e enc
	e.array(3)
	e.str("test.packed")
	e.bin(entries.b)
	e.chunkOption(chunk)
	c.send(t, e.b)
	if got := c.readAck(t); got != chunk {
		t.Fatalf("ack %q, want %q", got, chunk)
	}

	// Message mode with an integer time and no chunk: recorded, not acked.
	e = enc{}
	e.array(3)
	e.str("test.message")
	e.uint32(1_700_000_002)
	e.mapHeader(1)
	e.str("message")
	e.str("no ack")
	c.send(t, e.b)
	// The next thing on the wire must be the ack of the next message.
	sendOne(t, s, c, "after")
	// A str that is not UTF-8 loses its bad byte.
	badChunk := newChunk(t)
	c.send(t, forward("test.forward", badChunk, ts, "bad \xff byte"))
	if got := c.readAck(t); got != badChunk {
		t.Fatalf("ack %q, want %q", got, badChunk)
	}
	// A line longer than Records' read buffer.
	sendOne(t, s, c, strings.Repeat("long ", 100<<10))

	recs := s.WaitRecords(t, 7, ioTimeout)
	if len(recs) != 7 {
		t.Fatalf("%d records, want 7", len(recs))
	}
	if got := recs[5].Fields["message"]; got != "bad \ufffd byte" {
		t.Errorf("invalid UTF-8 str arrived as %q, want %q", got, "bad \ufffd byte")
	}
	p1, p2, m := recs[1], recs[2], recs[3]
	if p1.Mode != "PackedForward" || p1.Tag != "test.packed" || p1.Chunk != chunk || p1.Fields["message"] != "packed 1" || !p1.Time.Equal(ts) || !p1.EventTime {
		t.Errorf("first packed record %+v", p1)
	}
	if raw, _ := p2.Fields["raw"].([]byte); !bytes.Equal(raw, []byte{0xff, 0xfe, 0x00}) || p2.Fields["message"] != "packed 2" {
		t.Errorf("second packed record %+v, want raw bytes ff fe 00", p2)
	}
	if m.Mode != "Message" || m.Chunk != "" || m.EventTime || !m.Time.Equal(time.Unix(1_700_000_002, 0)) || m.Fields["message"] != "no ack" {
		t.Errorf("message mode record %+v", m)
	}
	if recs[4].Fields["message"] != "after" {
		t.Errorf("last record %+v, want message after", recs[4])
	}
}

func TestSharedKey(t *testing.T) {
	const key = "s3cret key"
	s := Start(t, Options{SharedKey: key})

	c := dial(t, s.Addr(), nil)
	start := time.Now()
	pong := c.handshake(t, key)
	t.Logf("handshake in %v", time.Since(start))
	if want := []any{"PONG", true, "", s.ServerHostname}; !reflect.DeepEqual(pong[:4], want) {
		t.Fatalf("PONG = %#v, want %#v and the digest", pong, want)
	}
	sendOne(t, s, c, "authenticated")

	t.Run("wrong key", func(t *testing.T) {
		c := dial(t, s.Addr(), nil)
		pong := c.handshake(t, "not the key")
		if want := []any{"PONG", false, "shared key mismatch", s.ServerHostname, ""}; !reflect.DeepEqual(pong, want) {
			t.Fatalf("PONG = %#v, want %#v", pong, want)
		}
		c.readClosed(t)
	})

	t.Run("no handshake", func(t *testing.T) {
		c := dial(t, s.Addr(), nil)
		if _, err := c.read(); err != nil { // the HELO
			t.Fatal(err)
		}
		c.send(t, forward("test.forward", newChunk(t), time.Now(), "unauthenticated"))
		c.readClosed(t)
	})

	if recs, err := s.Records(); err != nil || len(recs) != 1 {
		t.Fatalf("records %+v, %v; want only the authenticated one", recs, err)
	}
}

func TestTLS(t *testing.T) {
	for _, key := range []string{"", "tls key"} {
		t.Run(fmt.Sprintf("sharedKey=%q", key), func(t *testing.T) {
			s := Start(t, Options{TLS: true, SharedKey: key})
			pem, err := os.ReadFile(s.CAFile)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				t.Fatalf("no certificate in %s", s.CAFile)
			}
			c := dial(t, s.Addr(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
			if key != "" {
				if pong := c.handshake(t, key); pong[1] != true {
					t.Fatalf("PONG = %#v", pong)
				}
			}
			sendOne(t, s, c, "over TLS")

			// Plain TCP to the TLS port gets nothing accepted.
			plain := dial(t, s.Addr(), nil)
			plain.send(t, forward("test.forward", newChunk(t), time.Now(), "plain"))
			if v, err := plain.read(); err == nil {
				t.Fatalf("plain TCP to the TLS port read %#v", v)
			}
			if recs, err := s.Records(); err != nil || len(recs) != 1 {
				t.Fatalf("records %+v, %v; want only the TLS one", recs, err)
			}
		})
	}
}

func TestKillRestart(t *testing.T) {
	s := Start(t, Options{})
	addr := s.Addr()
	c := dial(t, addr, nil)
	sendOne(t, s, c, "before")

	start := time.Now()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed in %v", time.Since(start))
	c.readClosed(t)
	if conn, err := net.DialTimeout("tcp", addr, ioTimeout); err == nil {
		conn.Close()
		t.Fatal("connected to a killed server")
	}

	start = time.Now()
	s.Restart(t)
	t.Logf("restarted in %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("address %s after restart, want %s", s.Addr(), addr)
	}
	c = dial(t, addr, nil)
	sendOne(t, s, c, "after")
	recs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Fields["message"] != "before" || recs[1].Fields["message"] != "after" {
		t.Fatalf("records %+v, want before and after", recs)
	}
}
