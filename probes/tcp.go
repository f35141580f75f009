package probes

import (
	"context"
	"fmt"
	"net"
)

// TCPCheck passes when a TCP connection to its address can be opened within
// the check's timeout; the connection is closed at once.
type TCPCheck struct {
	address string
}

// NewTCP returns a check of address ("host:port"; a name is resolved on
// every look, so a moved Service is followed).
func NewTCP(address string) *TCPCheck {
	return &TCPCheck{address: address}
}

// Check implements Checker.
func (c *TCPCheck) Check(ctx context.Context) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.address)
	if err != nil {
		// net.OpError already says "dial tcp ADDR: ..."
		return "", err
	}
	remote := conn.RemoteAddr().String()
	conn.Close()
	return fmt.Sprintf("connected to %s", remote), nil
}
