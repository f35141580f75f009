package supervise

import (
	"fmt"
	"strings"
	"testing"
)

// Tail keeps the last lines that fit, whole: a line cut by the bound is
// left out, and writes of any size keep the memory bounded.
func TestTail(t *testing.T) {
	tl := NewTail(20)
	for i := range 100 {
		fmt.Fprintf(tl, "line %02d\n", i)
	}
	if got, want := tl.String(), "line 98\nline 99"; got != want {
		t.Errorf("tail %q, want %q", got, want)
	}
	if len(tl.buf) > 40 {
		t.Errorf("%d bytes kept for a tail of 20", len(tl.buf))
	}
	short := NewTail(100)
	short.Write([]byte("only line\n"))
	if got := short.String(); got != "only line" {
		t.Errorf("tail %q, want the whole output", got)
	}
	big := NewTail(10)
	big.Write([]byte(strings.Repeat("x", 50)))
	if got := big.String(); len(got) != 10 {
		t.Errorf("a line longer than the bound: %q, want its last 10 bytes", got)
	}
}
