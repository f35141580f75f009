package probes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// FileCheck passes while a heartbeat file is fresh: a service (or its
// watchdog thread) touches it, and a hung one stops doing so even though its
// process and ports are still there.
type FileCheck struct {
	path   string
	maxAge time.Duration
	now    func() time.Time // injectable for tests
}

// NewFile returns a check that path was modified less than maxAge ago.
func NewFile(path string, maxAge time.Duration) *FileCheck {
	return &FileCheck{path: path, maxAge: maxAge, now: time.Now}
}

// Check implements Checker.
func (c *FileCheck) Check(context.Context) (string, error) {
	fi, err := os.Stat(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: missing", c.path)
	}
	if err != nil {
		return "", err // *PathError names the file
	}
	// A future mtime (clock skew between writer and reader) counts as fresh.
	age := max(c.now().Sub(fi.ModTime()), 0)
	if age >= c.maxAge {
		return "", fmt.Errorf("%s: last modified %s ago (max %s)", c.path, heartbeatAge(age), heartbeatAge(c.maxAge))
	}
	return fmt.Sprintf("modified %s ago", heartbeatAge(age)), nil
}

// heartbeatAge formats d as operators read heartbeat ages: "95s", not "1m35s".
func heartbeatAge(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%ds", int64(d/time.Second))
}
