package kolla

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Render throughput for a 200-file kolla config set: plan (read, resolve,
// compare) and apply (write, chown, chmod, fsync, rename) every file, each
// iteration on fresh content so every file is really written.
func BenchmarkKollaRender200(b *testing.B) {
	const n = 200
	root := b.TempDir()
	for _, d := range []string{"etc", "var/lib/kolla/config_files"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nnova:x:42436:42436::/var/lib/nova:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nnova:x:42436:\n"), 0o644)
	cfg := &Config{Command: "/bin/true"}
	for i := range n {
		name := fmt.Sprintf("f%03d.conf", i)
		cfg.ConfigFiles = append(cfg.ConfigFiles, ConfigFile{
			Source: "/var/lib/kolla/config_files/" + name, Dest: "/etc/nova/" + name, Owner: "nova", Perm: "0640",
		})
	}
	bytes := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for j := range n {
			body := strings.Repeat(fmt.Sprintf("option_%d = %d\n", j, i), 64)
			bytes += len(body)
			os.WriteFile(filepath.Join(root, "var/lib/kolla/config_files", fmt.Sprintf("f%03d.conf", j)), []byte(body), 0o644)
		}
		b.StartTimer()
		p, err := NewPlan(cfg, Options{Root: root, StateDir: DefaultStateDir, Strategy: StrategyCopyAlways})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Apply(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "files/s")
	b.SetBytes(int64(bytes / max(b.N, 1)))
}

// The baseline for BenchmarkKollaRender200, in the same run: the least a
// durable copy costs, write + fsync + rename of each of the 200 files, with
// no parsing, planning, ownership or comparison.
func BenchmarkKollaRender200Baseline(b *testing.B) {
	const n = 200
	dir := b.TempDir()
	for i := range b.N {
		for j := range n {
			body := []byte(strings.Repeat(fmt.Sprintf("option_%d = %d\n", j, i), 64))
			dst := filepath.Join(dir, fmt.Sprintf("f%03d.conf", j))
			f, err := os.CreateTemp(dir, ".tmp")
			if err != nil {
				b.Fatal(err)
			}
			f.Write(body)
			f.Sync()
			f.Close()
			if err := os.Rename(f.Name(), dst); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "files/s")
}
