package logs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkShipForward: a 500,000-line oslo-style log file shipped by the
// shipper to a minimal forward receiver that acks every chunk (so the
// receiver is not the bottleneck), offsets committed after each ack;
// against the physical baseline in the same run: the same file copied raw
// into a loopback TCP socket. Each op ships the whole file, from a new
// state directory; the peaks of heap and RSS are the process's, the
// receiver's included (it allocates next to nothing).
func BenchmarkShipForward(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "keystone")
	os.MkdirAll(dir, 0o755)
	log := filepath.Join(dir, "keystone.log")
	f, err := os.Create(log)
	if err != nil {
		b.Fatal(err)
	}
	const n = 500_000
	for i := 0; i < n; i += 1000 {
		f.WriteString(lines(i, i+1000))
	}
	size, _ := f.Seek(0, io.SeekCurrent)
	f.Close()

	// The baseline: a raw copy into a loopback socket.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	start := time.Now()
	c, _ := net.Dial("tcp", ln.Addr().String())
	src, _ := os.Open(log)
	io.Copy(c, src)
	src.Close()
	c.Close()
	<-got
	raw := time.Since(start)

	// The shipper to a receiver that only acks.
	rl, _ := net.Listen("tcp", "127.0.0.1:0")
	defer rl.Close()
	go func() {
		for {
			c, err := rl.Accept()
			if err != nil {
				return
			}
			go ackAll(c)
		}
	}()
	fw, err := NewForward(ForwardConfig{Address: rl.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	defer fw.Close()
	obs := &countObserver{}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &ForwardSink{F: fw}, Idle: 10 * time.Millisecond, Observer: obs}
	peak := watchMemory()
	var took time.Duration
	b.ResetTimer()
	for range b.N {
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
	}
	b.StopTimer()
	heap, rss, base := peak()
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/took.Seconds(), "MB/s")
	b.ReportMetric(float64(n*b.N)/took.Seconds(), "lines/s")
	b.ReportMetric(float64(size)/1e6/raw.Seconds(), "raw-copy-MB/s")
	b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
	if rss > 0 {
		b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(float64(base)/(1<<20), "base-RSS-MiB")
	}
	b.Logf("\n%s", strings.Join([]string{
		fmt.Sprintf("file -> forward receiver with acks: %.1f MB in %v: %.1f MB/s, %.0f lines/s", mb, took.Round(time.Millisecond), mb/took.Seconds(), float64(n*b.N)/took.Seconds()),
		fmt.Sprintf("raw copy into loopback TCP (baseline): %.1f MB/s (%.1fx the shipper)", float64(size)/1e6/raw.Seconds(), (took.Seconds()/float64(b.N))/raw.Seconds()),
		fmt.Sprintf("peak heap %.1f MiB, peak RSS %.1f MiB (%.1f MiB before the shipping: the test binary, the runtime)", float64(heap)/(1<<20), float64(rss)/(1<<20), float64(base)/(1<<20)),
	}, "\n"))
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
// message's shape but skips its entries without decoding them: it runs in
// the benchmark's process, and what it would allocate is not the
// shipper's.
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
