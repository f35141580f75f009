package logs

import (
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(receiverEnv) != "" {
		os.Exit(serveBenchReceiver())
	}
	goleak.VerifyTestMain(m)
}

// receiver is a minimal forward server, decoding with the package's decoder.
// It records the entries of a message before it acks it (as fluentd does),
// and can misbehave on demand.
type receiver struct {
	t  *testing.T
	ln net.Listener

	sharedKey   string
	hostname    string            // sent in PONG
	nonceStr    bool              // HELO nonce and auth as str (fluent-bit), not bin (fluentd)
	users       map[string]string // user authentication when not nil
	badDigest   bool              // answer PONG true with a digest of another key
	noKeepalive bool              // HELO keepalive false; close after each ack
	maxBody     int               // never ack (nor record) a message with more entry bytes
	ackDelay    time.Duration
	dropAcks    atomic.Int32 // record but do not ack the next N messages
	closeAt     atomic.Int32 // record message N (counted from 1) and close its connection unacked

	mu         sync.Mutex
	recs       []recvEntry
	msgs       int            // messages received
	chunks     map[string]int // messages received by chunk id
	acked      []int          // entry bytes of each acked message
	pending    int            // messages received and not acked yet
	maxPending int
	conns      int
	live       map[net.Conn]bool
	wg         sync.WaitGroup
}

type recvEntry struct {
	tag    string
	time   time.Time
	fields map[string]any
	chunk  string
}

func newReceiver(t *testing.T, setup func(*receiver)) *receiver {
	t.Helper()
	r := &receiver{t: t, hostname: "receiver", chunks: map[string]int{}, live: map[net.Conn]bool{}}
	if setup != nil {
		setup(r)
	}
	r.listen("127.0.0.1:0")
	t.Cleanup(r.stop)
	return r
}

func (r *receiver) addr() string { return r.ln.Addr().String() }

func (r *receiver) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns++
			r.live[c] = true
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.serve(c)
				c.Close()
				r.mu.Lock()
				delete(r.live, c)
				r.mu.Unlock()
			}()
		}
	}()
}

// stop closes the listener and every connection, as a crash would.
func (r *receiver) stop() {
	r.mu.Lock()
	r.ln.Close()
	for c := range r.live {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *receiver) send(c net.Conn, v any) {
	if _, err := c.Write(encodeValue(nil, v)); err != nil {
		r.t.Logf("receiver: write: %v", err)
	}
}

func testDigest(parts ...[]byte) string {
	h := sha512.New()
	for _, p := range parts {
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r *receiver) handshake(c net.Conn, mr *msgReader) bool {
	nonce := make([]byte, 16)
	rand.Read(nonce)
	var auth []byte
	if r.users != nil {
		auth = make([]byte, 16)
		rand.Read(auth)
	}
	if r.nonceStr { // fluent-bit: printable str
		nonce = []byte(hex.EncodeToString(nonce))
		if auth != nil {
			auth = []byte(hex.EncodeToString(auth))
		}
	}
	bs := func(p []byte) any {
		if r.nonceStr || p == nil {
			return string(p)
		}
		return p
	}
	r.send(c, []any{"HELO", map[string]any{"nonce": bs(nonce), "auth": bs(auth), "keepalive": !r.noKeepalive}})
	v, err := mr.next()
	if err != nil {
		return false
	}
	a, _ := v.([]any)
	if len(a) != 6 || a[0] != "PING" {
		r.send(c, []any{"PONG", false, "invalid ping message", "", ""})
		return false
	}
	host, _ := a[1].(string)
	salt, _ := a[2].(string)
	digest, _ := a[3].(string)
	user, _ := a[4].(string)
	pw, _ := a[5].(string)
	if len(salt) == 0 {
		r.t.Errorf("receiver: empty salt in PING %#v", v)
	}
	if digest != testDigest([]byte(salt), []byte(host), nonce, []byte(r.sharedKey)) {
		r.send(c, []any{"PONG", false, "shared_key mismatch", "", ""})
		return false
	}
	if r.users != nil {
		want, ok := r.users[user]
		if !ok || pw != testDigest(auth, []byte(user), []byte(want)) {
			r.send(c, []any{"PONG", false, "username/password mismatch", "", ""})
			return false
		}
	} else if user != "" || pw != "" {
		r.t.Errorf("receiver: user %q and password digest %q without user authentication", user, pw)
	}
	key := r.sharedKey
	if r.badDigest {
		key = "not the key"
	}
	r.send(c, []any{"PONG", true, "", r.hostname, testDigest([]byte(salt), []byte(r.hostname), nonce, []byte(key))})
	return true
}

func (r *receiver) serve(c net.Conn) {
	mr := &msgReader{r: c, max: 64 << 20}
	if r.sharedKey != "" && !r.handshake(c, mr) {
		return
	}
	acks := make(chan string, 64)
	ackDone := make(chan struct{})
	go func() { // acks in order, after ackDelay
		defer close(ackDone)
		for id := range acks {
			time.Sleep(r.ackDelay)
			r.mu.Lock()
			r.pending--
			r.mu.Unlock()
			r.send(c, map[string]any{"ack": id})
			if r.noKeepalive {
				c.Close()
			}
		}
	}()
	defer func() {
		close(acks)
		<-ackDone
	}()
	for {
		v, err := mr.next()
		if err != nil {
			return
		}
		tag, body, chunk, recs, err := parseMessage(v)
		if err != nil {
			r.t.Errorf("receiver: %v", err)
			return
		}
		r.mu.Lock()
		r.msgs++
		n := r.msgs
		r.chunks[chunk]++
		if r.maxBody > 0 && len(body) > r.maxBody {
			r.mu.Unlock()
			continue // dropped without a word, as fluentd over chunk_size_limit
		}
		for _, e := range recs {
			e.tag, e.chunk = tag, chunk
			r.recs = append(r.recs, e)
		}
		if int32(n) == r.closeAt.Load() {
			r.mu.Unlock()
			return
		}
		if r.dropAcks.Load() > 0 {
			r.dropAcks.Add(-1)
			r.mu.Unlock()
			continue
		}
		r.acked = append(r.acked, len(body))
		r.pending++
		r.maxPending = max(r.maxPending, r.pending)
		r.mu.Unlock()
		acks <- chunk
	}
}

// parseMessage checks a PackedForward message as Send writes it.
func parseMessage(v any) (tag string, body []byte, chunk string, recs []recvEntry, err error) {
	a, _ := v.([]any)
	if len(a) != 3 {
		return "", nil, "", nil, fmt.Errorf("not a PackedForward message: %#v", v)
	}
	tag, _ = a[0].(string)
	body, ok := a[1].([]byte)
	opt, _ := a[2].(map[string]any)
	chunk, _ = opt["chunk"].(string)
	size, _ := opt["size"].(int64)
	if tag == "" || !ok || len(opt) != 2 || len(chunk) != 24 {
		return "", nil, "", nil, fmt.Errorf("bad PackedForward message: %#v", v)
	}
	for p := body; len(p) > 0; {
		e, n, err := decode(p)
		if err != nil {
			return "", nil, "", nil, fmt.Errorf("entry %d: %v", len(recs), err)
		}
		p = p[n:]
		ea, _ := e.([]any)
		if len(ea) != 2 {
			return "", nil, "", nil, fmt.Errorf("entry %d: %#v", len(recs), e)
		}
		et, _ := ea[0].(msgExt)
		fields, ok := ea[1].(map[string]any)
		if et.Type != 0 || len(et.Data) != 8 || !ok {
			return "", nil, "", nil, fmt.Errorf("entry %d: %#v", len(recs), e)
		}
		t := time.Unix(int64(binary.BigEndian.Uint32(et.Data)), int64(binary.BigEndian.Uint32(et.Data[4:])))
		recs = append(recs, recvEntry{time: t, fields: fields})
	}
	if size != int64(len(recs)) {
		return "", nil, "", nil, fmt.Errorf("size %d for %d entries", size, len(recs))
	}
	return tag, body, chunk, recs, nil
}

// counts returns how many times each message arrived.
func (r *receiver) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for _, e := range r.recs {
		s, _ := e.fields["message"].(string)
		m[s]++
	}
	return m
}

func testEntries(prefix string, n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Time: time.Now(), Fields: []Field{
			{"message", fmt.Sprintf("%s-%d %s", prefix, i, strings.Repeat("x", 40))},
			{"seq", i},
		}}
	}
	return es
}

func forwardTestLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(forwardLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type forwardLogWriter struct{ t *testing.T }

func (w forwardLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newForward(t *testing.T, cfg ForwardConfig) *Forward {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = forwardTestLogger(t)
	}
	if cfg.SelfHostname == "" {
		cfg.SelfHostname = "agent-test"
	}
	f, err := NewForward(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkDelivered fails unless every message of want arrived, at least once, and
// returns the number of duplicates.
func checkDelivered(t *testing.T, got map[string]int, want [][]Entry) int {
	t.Helper()
	dups, n := 0, 0
	for _, es := range want {
		for _, e := range es {
			m := e.Fields[0].Value.(string)
			n++
			switch c := got[m]; {
			case c == 0:
				t.Errorf("lost: %s", m)
			case c > 1:
				dups += c - 1
			}
		}
	}
	if len(got) != n {
		t.Errorf("%d distinct messages arrived, %d sent", len(got), n)
	}
	return dups
}

// Concurrent Sends: every entry arrives once, with its fields and time, and
// no more than MaxInFlight messages await their ack at once.
func TestForwardSend(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.ackDelay = 2 * time.Millisecond })
	f := newForward(t, ForwardConfig{Address: r.addr(), MaxInFlight: 3, AckTimeout: 5 * time.Second})

	when := time.Unix(1700000000, 123456789)
	err := f.Send(context.Background(), "kolla.keystone", []Entry{{Time: when, Fields: []Field{
		{"message", "hello"}, {"raw", []byte("\xff\x00")}, {"offset", uint64(1 << 40)},
		{"neg", int64(-5)}, {"ok", true}, {"none", nil},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	got := r.recs[0]
	r.mu.Unlock()
	want := map[string]any{"message": "hello", "raw": []byte("\xff\x00"), "offset": int64(1 << 40), "neg": int64(-5), "ok": true, "none": nil}
	if got.tag != "kolla.keystone" || !got.time.Equal(when) || !reflect.DeepEqual(got.fields, want) {
		t.Errorf("got %s %v %#v", got.tag, got.time, got.fields)
	}
	if err := f.Send(context.Background(), "t", []Entry{{Fields: []Field{{"bad", 1.5}}}}); err == nil {
		t.Error("a float field was accepted")
	}

	const senders, sends, per = 8, 15, 10
	var wg sync.WaitGroup
	sent := make([][]Entry, senders*sends)
	for g := range senders {
		wg.Go(func() {
			for i := range sends {
				es := testEntries(fmt.Sprintf("g%d-s%d", g, i), per)
				sent[g*sends+i] = es
				if err := f.Send(context.Background(), "kolla.nova", es); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	counts := r.counts()
	delete(counts, "hello")
	if dups := checkDelivered(t, counts, sent); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns != 1 {
		t.Errorf("%d connections, want 1", r.conns)
	}
	if r.maxPending < 2 || r.maxPending > 3 {
		t.Errorf("at most %d messages awaited their ack at once, want 2..3", r.maxPending)
	}
}

// The first ack is lost: the chunk is sent again after the ack timeout, with
// the same chunk id, and arrives twice.
func TestForwardDroppedAck(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.dropAcks.Store(1) })
	f := newForward(t, ForwardConfig{Address: r.addr(), AckTimeout: 200 * time.Millisecond})
	es := testEntries("a", 5)
	start := time.Now()
	if err := f.Send(context.Background(), "t", es); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("acked after %v, before the ack timeout", d)
	}
	// Twice in all (more only if a machine under load delays an ack past
	// the timeout).
	if dups := checkDelivered(t, r.counts(), [][]Entry{es}); dups == 0 || dups%5 != 0 {
		t.Errorf("%d duplicates, want 5 (the chunk sent twice)", dups)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.chunks) != 1 || r.conns < 2 {
		t.Errorf("chunk ids %v over %d connections; want one id sent twice over 2", r.chunks, r.conns)
	}
}

// A message over the receiver's limit is never acked: after two misses it is
// split, and again, until the halves pass.
func TestForwardSplit(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.maxBody = 1500 })
	f := newForward(t, ForwardConfig{Address: r.addr(), AckTimeout: 150 * time.Millisecond})
	es := testEntries("big", 64) // about 5 KiB: split 64 -> 32 -> 16 entries
	if err := f.Send(context.Background(), "t", es); err != nil {
		t.Fatal(err)
	}
	// None, but for a 16-entry half sent again when a loaded machine
	// delays its ack past the timeout.
	if dups := checkDelivered(t, r.counts(), [][]Entry{es}); dups%16 != 0 {
		t.Errorf("%d duplicates, want none (or whole halves of 16 sent again)", dups)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.acked {
		if n > 1500 {
			t.Errorf("acked a message of %d bytes", n)
		}
	}
	// 64 twice, 32 twice, then two halves of 16 that pass, twice: 10 (more
	// only if a machine under load delays an ack past the timeout).
	if r.msgs < 10 {
		t.Errorf("%d messages received, want 10", r.msgs)
	}
	t.Logf("%d messages received", r.msgs)
	// Order within the Send is kept.
	next := int64(0)
	for _, e := range r.recs {
		if seq := e.fields["seq"].(int64); seq == next {
			next++
		} else if seq > next {
			t.Fatalf("entry %d arrived before entry %d", seq, next)
		}
	}
}

// One entry that is never acked cannot be split: Send keeps trying until
// its context ends.
func TestForwardOversizedEntry(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.maxBody = 10 })
	f := newForward(t, ForwardConfig{Address: r.addr(), AckTimeout: 50 * time.Millisecond})
	// The context ends once the entry went twice (not after a time a
	// loaded machine may fill with fewer tries).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			r.mu.Lock()
			n := r.msgs
			r.mu.Unlock()
			if n >= 2 {
				cancel()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err := f.Send(ctx, "t", testEntries("huge", 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Send: %v, want it to go on until its context ends", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs < 2 {
		t.Errorf("sent %d times", r.msgs)
	}
}

// The receiver closes the connection in the middle of a stream of
// concurrent Sends: they reconnect and resend; nothing is lost and the
// duplicates are bounded by the chunks in flight.
func TestForwardConnectionClosed(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.closeAt.Store(10); r.ackDelay = time.Millisecond })
	f := newForward(t, ForwardConfig{Address: r.addr(), MaxInFlight: 4, AckTimeout: 5 * time.Second})
	var wg sync.WaitGroup
	sent := make([][]Entry, 40)
	for i := range sent {
		sent[i] = testEntries(fmt.Sprint(i), 10)
	}
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(sent); i += 4 {
				if err := f.Send(context.Background(), "t", sent[i]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	dups := checkDelivered(t, r.counts(), sent)
	t.Logf("%d duplicate entries", dups)
	if dups > 4*10 {
		t.Errorf("%d duplicates, more than 4 chunks in flight of 10 entries", dups)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns != 2 {
		t.Errorf("%d connections, want 2", r.conns)
	}
}

// The receiver goes away (listener and connections) and comes back on the
// same port: the Sends wait, reconnect with backoff, and deliver.
func TestForwardReceiverRestart(t *testing.T) {
	r := newReceiver(t, nil)
	addr := r.addr()
	var mu sync.Mutex
	var health []string // what OnHealth was told, in order
	f := newForward(t, ForwardConfig{Address: addr, AckTimeout: 5 * time.Second, OnHealth: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			health = append(health, "fail")
		} else {
			health = append(health, "ok")
		}
	}})
	if err := f.Send(context.Background(), "t", testEntries("before", 3)); err != nil {
		t.Fatal(err)
	}
	r.stop()
	done := make(chan error, 1)
	es := testEntries("during", 3)
	go func() { done <- f.Send(context.Background(), "t", es) }()
	// Back once the Send has failed an attempt against the receiver down.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		failed := slices.Contains(health, "fail")
		mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no failed attempt while the receiver was down")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Send returned while the receiver was down: %v", err)
	default:
	}
	r.listen(addr)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery 5s after the receiver came back")
	}
	checkDelivered(t, r.counts(), [][]Entry{testEntries("before", 3), es})
	// The outage is seen (a failure per attempt), and its end once.
	mu.Lock()
	defer mu.Unlock()
	if len(health) < 2 || health[0] != "fail" || health[len(health)-1] != "ok" || slices.Index(health, "ok") != len(health)-1 {
		t.Errorf("OnHealth was told %v, want failures then one ok", health)
	}
}

func TestForwardHandshake(t *testing.T) {
	ok := []struct {
		name  string
		setup func(*receiver)
		cfg   ForwardConfig
	}{
		{"fluentd style, bin nonce", func(r *receiver) {}, ForwardConfig{}},
		{"fluent-bit style, str nonce", func(r *receiver) { r.nonceStr = true }, ForwardConfig{}},
		{"user auth", func(r *receiver) { r.users = map[string]string{"agent": "pw"} }, ForwardConfig{Username: "agent", Password: "pw"}},
		{"user auth, str salt", func(r *receiver) { r.users = map[string]string{"agent": "pw"}; r.nonceStr = true }, ForwardConfig{Username: "agent", Password: "pw"}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			r := newReceiver(t, func(r *receiver) { r.sharedKey = "s3cret"; tc.setup(r) })
			cfg := tc.cfg
			cfg.Address, cfg.SharedKey = r.addr(), "s3cret"
			f := newForward(t, cfg)
			es := testEntries("x", 2)
			if err := f.Send(context.Background(), "t", es); err != nil {
				t.Fatal(err)
			}
			checkDelivered(t, r.counts(), [][]Entry{es})
		})
	}

	bad := []struct {
		name   string
		setup  func(*receiver)
		cfg    ForwardConfig
		reason string
	}{
		{"wrong key", nil, ForwardConfig{SharedKey: "wrong"}, "the server's reason: shared_key mismatch"},
		{"wrong password", func(r *receiver) { r.users = map[string]string{"agent": "pw"} },
			ForwardConfig{SharedKey: "s3cret", Username: "agent", Password: "nope"}, "reason: username/password mismatch"},
		{"server without the key", func(r *receiver) { r.badDigest = true }, ForwardConfig{SharedKey: "s3cret"}, "does not know our shared key"},
		{"no key configured", nil, ForwardConfig{}, "no shared key is configured"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			r := newReceiver(t, func(r *receiver) {
				r.sharedKey = "s3cret"
				if tc.setup != nil {
					tc.setup(r)
				}
			})
			cfg := tc.cfg
			cfg.Address = r.addr()
			f := newForward(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := f.Send(ctx, "t", testEntries("x", 1))
			if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Send: %v; want ErrAuth saying %s", err, tc.reason)
			}
			t.Log(err)
			if ctx.Err() != nil {
				t.Error("Send retried until its context ended")
			}
			if n := len(r.counts()); n != 0 {
				t.Errorf("%d records accepted", n)
			}
		})
	}
}

// A server that says keepalive false (fluentd's deny_keepalive) closes the
// connection after each response: one message per connection, no resends.
func TestForwardNoKeepalive(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.sharedKey = "k"; r.noKeepalive = true })
	f := newForward(t, ForwardConfig{Address: r.addr(), SharedKey: "k", AckTimeout: 5 * time.Second})
	var wg sync.WaitGroup
	sent := make([][]Entry, 12)
	for i := range sent {
		sent[i] = testEntries(fmt.Sprint(i), 2)
	}
	for i := range sent {
		wg.Go(func() {
			if err := f.Send(context.Background(), "t", sent[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if dups := checkDelivered(t, r.counts(), sent); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns != len(sent) || r.msgs != len(sent) {
		t.Errorf("%d messages over %d connections, want %d over as many", r.msgs, r.conns, len(sent))
	}
}

func TestForwardCancelAndClose(t *testing.T) {
	r := newReceiver(t, func(r *receiver) { r.dropAcks.Store(100) })
	f := newForward(t, ForwardConfig{Address: r.addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := f.Send(ctx, "t", testEntries("a", 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send: %v, want the context's deadline", err)
	}
	received := func() int { r.mu.Lock(); defer r.mu.Unlock(); return r.msgs }
	before := received()
	done := make(chan error, 1)
	go func() { done <- f.Send(context.Background(), "t", testEntries("b", 1)) }()
	// Closed once b is at the receiver (its ack dropped): during the Send,
	// not before it (a Send after Close is ErrClosed too).
	for deadline := time.Now().Add(10 * time.Second); received() == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Send never reached the receiver")
		}
	}
	f.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("Send during Close: %v, want ErrClosed", err)
	}
	if err := f.Send(context.Background(), "t", testEntries("c", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}

	// Nothing listening: Send waits (with backoff) until its context ends
	// and says why.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ln.Close()
	// Its context ends at the first refusal, however late a loaded machine
	// makes the dial.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	f = newForward(t, ForwardConfig{Address: ln.Addr().String(), OnHealth: func(err error) {
		if err != nil {
			cancel()
		}
	}})
	err := f.Send(ctx, "t", testEntries("d", 1))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Send with nothing listening: %v", err)
	}

	if _, err := NewForward(ForwardConfig{Address: "no-port"}); err == nil {
		t.Error("NewForward accepted an address without a port")
	}
}

// A receiver that is not there at all: Send keeps dialling inside, and
// OnHealth says so while it does.
func TestForwardHealthWhileUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	fails := make(chan error, 100)
	f := newForward(t, ForwardConfig{Address: addr, AckTimeout: time.Second, OnHealth: func(err error) {
		if err != nil {
			select {
			case fails <- err:
			default:
			}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Send(ctx, "t", testEntries("x", 1)) }()
	select {
	case err := <-fails:
		if !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("OnHealth told %v", err)
		}
	case err := <-done:
		t.Fatalf("Send returned (%v) before OnHealth heard of the failure", err)
	}
	cancel()
	<-done
}
