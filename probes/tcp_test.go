package probes

import (
	"context"
	"net"
	"strings"
	"testing"
)

func TestTCPCheck(t *testing.T) {
	ln := lcListen(t, "tcp", "127.0.0.1:0")
	detail, err := lcCheck(t, NewTCP(ln.Addr().String()))
	if err != nil || detail != "connected to "+ln.Addr().String() {
		t.Fatalf("got (%q, %v), want a pass", detail, err)
	}

	// A port nothing listens on any more.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	if _, err := lcCheck(t, NewTCP(addr)); err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("got %v, want connection refused naming %s", err, addr)
	}

	// The look's context bounds it.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewTCP(ln.Addr().String()).Check(ctx); err == nil {
		t.Fatal("a cancelled look passed")
	}

	if _, err := lcCheck(t, NewTCP("no-port")); err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Fatalf("got %v, want an error naming the address", err)
	}
}
