package logs

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkShipForward: a 500,000-line oslo-style log file shipped by the
// shipper to a minimal forward receiver that acks every chunk (so the
// receiver is not the bottleneck), offsets committed after each ack;
// against the physical baseline in the same run: the same file copied raw
// into a loopback TCP socket.
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
			go func() {
				defer c.Close()
				mr := &msgReader{r: c, max: 64 << 20}
				for {
					v, err := mr.next()
					if err != nil {
						return
					}
					a, _ := v.([]any)
					if len(a) != 3 {
						return
					}
					opt, _ := a[2].(map[string]any)
					c.Write(encodeValue(nil, map[string]any{"ack": opt["chunk"]}))
				}
			}()
		}
	}()
	fw, err := NewForward(ForwardConfig{Address: rl.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	defer fw.Close()
	state := filepath.Join(b.TempDir(), "state")
	sh, err := NewShipper(ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &ForwardSink{F: fw}, StateDir: state, Idle: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start = time.Now()
	stop := runShipper(b, sh.cfg)
	for {
		ps, _ := loadState(state)
		if len(ps) == 1 && ps[0].Offset == size {
			break
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	stop()
	b.StopTimer()
	mb := float64(size) / 1e6
	b.ReportMetric(mb/took.Seconds(), "MB/s")
	b.ReportMetric(float64(n)/took.Seconds(), "lines/s")
	b.ReportMetric(mb/raw.Seconds(), "raw-copy-MB/s")
	b.ReportMetric(0, "ns/op")
	b.Logf("\n%s", strings.Join([]string{
		fmt.Sprintf("file -> forward receiver with acks: %.1f MB in %v: %.1f MB/s, %.0f lines/s", mb, took.Round(time.Millisecond), mb/took.Seconds(), float64(n)/took.Seconds()),
		fmt.Sprintf("raw copy into loopback TCP (baseline): %.1f MB/s (%.1fx the shipper)", mb/raw.Seconds(), took.Seconds()/raw.Seconds()),
	}, "\n"))
}
