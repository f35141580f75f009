package proc

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestNewLinesLeavesAnUnfinishedLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.jsonl")
	if err := os.WriteFile(p, []byte("a\nbb\nccc"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	each := func(b []byte) error { got = append(got, string(b)); return nil }
	off, err := NewLines(p, 0, each)
	if err != nil || off != 5 || !slices.Equal(got, []string{"a\n", "bb\n"}) {
		t.Fatalf("off %d, %q, %v", off, got, err)
	}
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("c\n")
	f.Close()
	if off, err = NewLines(p, off, each); err != nil || off != 10 || got[2] != "cccc\n" {
		t.Fatalf("off %d, %q, %v", off, got, err)
	}
}

func TestPortSockets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	all, foreign, err := PortSockets(os.Getpid(), port, true)
	if err != nil || len(all) != 1 || len(foreign) != 0 {
		t.Fatalf("own listener: all %v, foreign %v, %v", all, foreign, err)
	}
	// The same socket seen from a process that holds no descriptor of it.
	all, foreign, err = PortSockets(os.Getppid(), port, true)
	if err != nil || len(all) != 1 || !slices.Equal(all, foreign) {
		t.Fatalf("another's listener: all %v, foreign %v, %v", all, foreign, err)
	}
}
