package discovery

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// attemptTimeout bounds one connection attempt, so that a peer that drops
// SYNs is looked at again instead of holding the wait for the kernel's minutes.
const attemptTimeout = 2 * time.Second

// checkTCP: a completed TCP handshake means the port is up.
func checkTCP(ctx context.Context, addr string) Observation {
	d := net.Dialer{Timeout: attemptTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return dialObservation(err)
	}
	c.Close()
	return ready("connected to %s", addr)
}

// checkFile: the path exists (a file, directory or anything else).
func checkFile(path string) Observation {
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		kind := "file"
		if fi.IsDir() {
			kind = "directory"
		}
		return ready("%s exists (%s)", path, kind)
	case errors.Is(err, fs.ErrNotExist):
		return waiting("%s does not exist", path)
	default:
		// Permission denied and the like will not fix themselves by waiting,
		// but a volume may still be mounting: keep looking, and say why.
		return unhealthy("%v", err)
	}
}

// checkSocket: a Unix socket that accepts a connection (a socket file left by
// a dead process refuses it).
func checkSocket(ctx context.Context, path string) Observation {
	d := net.Dialer{Timeout: attemptTimeout}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return waiting("%s does not exist", path)
		}
		return dialObservation(err)
	}
	c.Close()
	return ready("%s accepts connections", path)
}

func dialObservation(err error) Observation {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return waiting("connection refused")
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return waiting("%v", err)
	case errors.As(err, &dnsErr):
		return unhealthy("%v", err)
	}
	return waiting("%v", err)
}
