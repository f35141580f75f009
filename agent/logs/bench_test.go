package logs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
)

// BenchmarkShipForward: a 500,000-line oslo-style log file shipped by the
// shipper on one core (GOMAXPROCS=1) to a forward receiver in another
// process that acks every chunk without decoding its entries (so the
// receiver is not the bottleneck), offsets committed after each ack;
// against the physical baseline in the same run, op for op: the same file
// copied raw into a loopback socket of that process, which answers the
// count of bytes it read. Each op ships the whole file from a new state
// directory; every byte is accounted for on both sides. The peaks of heap
// and RSS are the shipping process's alone.
func BenchmarkShipForward(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 500_000
	dir, size := benchLog(b, n)
	rcv := startBenchReceiver(b)

	fw, err := NewForward(ForwardConfig{Address: rcv.ack})
	if err != nil {
		b.Fatal(err)
	}
	defer fw.Close()
	obs := &countObserver{}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &ForwardSink{F: fw}, Idle: 10 * time.Millisecond, Observer: obs}
	peak := watchMemory()
	var took, raw time.Duration
	b.ResetTimer()
	for range b.N {
		raw += rawCopy(b, filepath.Join(dir, "keystone.log"), rcv.raw, size)

		cfg.StateDir = filepath.Join(b.TempDir(), "state") // from the start each time
		obs.bytes.Store(0)
		start := time.Now()
		stop := runShipper(b, cfg)
		// Every line shipped and committed: the bytes of the records are
		// the file's but its newlines.
		for obs.bytes.Load() < size-n {
			time.Sleep(time.Millisecond)
		}
		took += time.Since(start)
		stop()
		if ps, _ := loadState(cfg.StateDir); len(ps) != 1 || ps[0].Offset != size {
			b.Fatalf("offsets %+v, want %d", ps, size)
		}
		if got := obs.bytes.Load(); got != size-n || obs.failed.Load() != 0 {
			b.Fatalf("%d bytes shipped, want %d; %d failures", got, size-n, obs.failed.Load())
		}
	}
	b.StopTimer()
	heap, rss, base := peak()
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/took.Seconds(), "MB/s")
	b.ReportMetric(float64(n*b.N)/took.Seconds(), "lines/s")
	b.ReportMetric(mb/raw.Seconds(), "raw-copy-MB/s")
	b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
	if rss > 0 {
		b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(float64(base)/(1<<20), "base-RSS-MiB")
	}
	b.Logf("\n%s", strings.Join([]string{
		fmt.Sprintf("file -> forward receiver with acks, GOMAXPROCS=1: %.1f MB in %v: %.1f MB/s, %.0f lines/s", mb, took.Round(time.Millisecond), mb/took.Seconds(), float64(n*b.N)/took.Seconds()),
		fmt.Sprintf("raw copy into loopback TCP (baseline, %d copies): %.1f MB/s (%.1fx the shipper)", b.N, mb/raw.Seconds(), took.Seconds()/raw.Seconds()),
		fmt.Sprintf("peak heap %.1f MiB, peak RSS %.1f MiB (%.1f MiB before the shipping: the test binary, the runtime)", float64(heap)/(1<<20), float64(rss)/(1<<20), float64(base)/(1<<20)),
	}, "\n"))
}

// BenchmarkShipFluentServer: 50,000 oslo-style lines shipped on one core to
// the real Fluent forward server (@fluent-org/logger's FluentServer on
// Node, internal/forwardserver), which acks each message once it has its
// entries; after each op every record the server wrote is checked against
// its line, in order. What it measures is the pair, the server included:
// the figure a sidecar of that kind would see.
func BenchmarkShipFluentServer(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 50_000
	dir, size := benchLog(b, n)
	want := strings.Split(strings.TrimSuffix(lines(0, n), "\n"), "\n")
	s := forwardserver.Start(b, forwardserver.Options{})
	out, err := os.Open(s.Output)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	records := bufio.NewReaderSize(out, 1<<20)

	fw, err := NewForward(ForwardConfig{Address: s.Addr(), AckTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer fw.Close()
	obs := &countObserver{}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &ForwardSink{F: fw}, Idle: 10 * time.Millisecond, Observer: obs}
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		cfg.StateDir = filepath.Join(b.TempDir(), "state")
		obs.bytes.Store(0)
		start := time.Now()
		stop := runShipper(b, cfg)
		for obs.bytes.Load() < size-n {
			time.Sleep(time.Millisecond)
		}
		took += time.Since(start)
		stop()
		b.StopTimer()
		if ps, _ := loadState(cfg.StateDir); len(ps) != 1 || ps[0].Offset != size || obs.failed.Load() != 0 {
			b.Fatalf("offsets %+v, want %d; %d failures", ps, size, obs.failed.Load())
		}
		// The server writes a message's entries before it acks it: every
		// line is in its output now.
		var end int64
		for i, w := range want {
			l, err := records.ReadBytes('\n')
			if err != nil {
				b.Fatalf("record %d of %d: %v", i+1, n, err)
			}
			// The message goes as bin (a line need not be UTF-8), which
			// the server's output writes as {"$bin": base64}.
			var r struct {
				Record struct {
					Message struct {
						Bin []byte `json:"$bin"`
					} `json:"message"`
					Offset int64 `json:"offset"`
				} `json:"record"`
			}
			end += int64(len(w)) + 1
			if err := json.Unmarshal(l, &r); err != nil || string(r.Record.Message.Bin) != w || r.Record.Offset != end {
				b.Fatalf("record %d: %q (%v), want the message %q at offset %d", i+1, l, err, w, end)
			}
		}
		if extra, _ := records.Peek(1); len(extra) > 0 {
			b.Fatalf("more records than lines shipped")
		}
		b.StartTimer()
	}
	b.StopTimer()
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/took.Seconds(), "MB/s")
	b.ReportMetric(float64(n*b.N)/took.Seconds(), "lines/s")
}

// benchLog writes n oslo-style lines to DIR/keystone.log in a new
// directory and returns DIR and the file's size.
func benchLog(b *testing.B, n int) (string, int64) {
	dir := filepath.Join(b.TempDir(), "keystone")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "keystone.log"))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		if _, err := f.WriteString(lines(i, min(i+1000, n))); err != nil {
			b.Fatal(err)
		}
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err := errors.Join(err, f.Close()); err != nil {
		b.Fatal(err)
	}
	return dir, size
}

// rawCopy copies the file into a connection to the receiver's raw port and
// reads back how many bytes it got, which must be the file's size.
func rawCopy(b *testing.B, path, addr string, size int64) time.Duration {
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	src, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	if _, err := io.Copy(c, src); err != nil {
		b.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		b.Fatalf("raw copy: no count back: %v", err)
	}
	if got, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64); err != nil || got != size {
		b.Fatalf("raw copy: the receiver read %q bytes, want %d", l, size)
	}
	return time.Since(start)
}

// receiverEnv, set, makes the test binary a benchmark receiver (see
// serveBenchReceiver) instead of running tests.
const receiverEnv = "KOLLA_AGENT_BENCH_RECEIVER"

type benchReceiver struct{ raw, ack string }

// startBenchReceiver runs this test binary again as the receivers of the
// shipping benchmarks, so that what they do is not in the benchmark's
// process: it lives until the benchmark ends (its stdin closes).
func startBenchReceiver(b *testing.B) benchReceiver {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), receiverEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("bench receiver: %v", err)
		}
	})
	var r benchReceiver
	if _, err := fmt.Fscan(out, &r.raw, &r.ack); err != nil {
		b.Fatalf("bench receiver: no addresses: %v", err)
	}
	return r
}

// serveBenchReceiver listens on two loopback ports, writes their addresses
// to stdout, and serves until stdin closes: on the first it reads each
// connection to its end and answers how many bytes it read; on the second
// it acks every PackedForward message (ackAll).
func serveBenchReceiver() int {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ack, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(raw.Addr(), ack.Addr())
	go serve(raw, func(c net.Conn) {
		defer c.Close()
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			fmt.Fprintln(c, "error:", err)
			return
		}
		fmt.Fprintln(c, n)
	})
	go serve(ack, ackAll)
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func serve(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// watchMemory samples the heap's objects every millisecond and resets the
// process's peak RSS (VmHWM); the function it returns stops sampling and
// says the peaks since: heap bytes, RSS bytes, and the RSS at the reset
// (RSS 0 when the kernel does not let the peak be reset: the peak would
// be the setup's).
func watchMemory() func() (heap, rss, base uint64) {
	// What the setup left is given back first: the peak is the shipping's.
	debug.FreeOSMemory()
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	base := procStatus("VmRSS:")
	done := make(chan struct{})
	var peak uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() (uint64, uint64, uint64) {
		close(done)
		wg.Wait()
		if !reset {
			return peak, 0, 0
		}
		return peak, procStatus("VmHWM:"), base
	}
}

// procStatus is a size in /proc/self/status, in bytes.
func procStatus(field string) uint64 {
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == field {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// countObserver counts the bytes shipped, and the failures.
type countObserver struct{ bytes, failed atomic.Int64 }

func (o *countObserver) Shipped(_ string, _, bytes int) { o.bytes.Add(int64(bytes)) }
func (o *countObserver) Failed(error)                   { o.failed.Add(1) }
func (o *countObserver) Recovered()                     {}
func (o *countObserver) Skipped(string, string)         {}

// ackAll acks every PackedForward message it reads from c. It checks the
// message's shape but skips its entries without decoding them, so the
// receiver is never what the shipper waits for.
func ackAll(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	// small decodes a small value (the tag, the option) in place, from
	// what is buffered, waiting for more only when it is not enough.
	small := func() (any, error) {
		for k := 1; k <= 4096; k++ {
			k = max(k, min(br.Buffered(), 4096))
			p, err := br.Peek(k)
			if len(p) < k {
				return nil, err
			}
			v, n, err := decode(p)
			if err == nil {
				br.Discard(n)
				return v, nil
			}
			if err != errShort {
				return nil, err
			}
		}
		return nil, errors.New("value too large")
	}
	for {
		if b, err := br.ReadByte(); err != nil || b != 0x93 {
			return
		}
		if tag, err := small(); err != nil || tag == "" {
			return
		}
		// bin 8, 16 or 32: its length, big-endian, then the entries.
		t, err := br.ReadByte()
		if err != nil || t < 0xc4 || t > 0xc6 {
			return
		}
		var n int
		for range 1 << (t - 0xc4) {
			c, err := br.ReadByte()
			if err != nil {
				return
			}
			n = n<<8 | int(c)
		}
		if _, err := br.Discard(n); err != nil {
			return
		}
		v, err := small()
		opt, _ := v.(map[string]any)
		if err != nil || opt["chunk"] == nil {
			return
		}
		if _, err := c.Write(encodeValue(nil, map[string]any{"ack": opt["chunk"]})); err != nil {
			return
		}
	}
}
