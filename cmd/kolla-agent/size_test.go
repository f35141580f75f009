package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The stripped static binary, built as `make build` builds it, with every
// duty linked, stays within its budget: 25,000,000 bytes (decimal, the
// stricter reading; raised from 20 MB by the project's steering so that a
// well-kept library such as gophercloud may do its job). kubernetes-entrypoint
// alone is 44 MB. It is static (no program
// interpreter, no shared library), so the scratch image of images/agent and
// any kolla base image run it.
func TestStrippedBinarySize(t *testing.T) {
	bin := buildStripped(t, ".")
	info, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stripped binary: %d bytes", info.Size())
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter: it is not static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	if info.Size() > 25_000_000 {
		t.Errorf("stripped binary is %d bytes, over 25,000,000: see which imports pull what (go tool nm -size -sort size)", info.Size())
	}
}

// BenchmarkBinarySize reports the stripped sizes for docs/benchmarks.md
// (`make bench`); TestStrippedBinarySize holds the budget.
func BenchmarkBinarySize(b *testing.B) {
	size := func(pkg string) float64 {
		info, err := os.Stat(buildStripped(b, pkg))
		if err != nil {
			b.Fatal(err)
		}
		return float64(info.Size())
	}
	agent, probe := size("."), size("../kolla-agent-probe")
	for range b.N {
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(agent, "agent-bytes")
	b.ReportMetric(probe, "probe-bytes")
}

// buildStripped builds pkg as `make build` does and returns the binary.
func buildStripped(tb testing.TB, pkg string) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "bin")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=size-test", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("%v\n%s", err, out)
	}
	return bin
}
