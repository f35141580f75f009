// Package ask is the exec-probe client: it asks the agent listening on a
// Unix socket for a probe and reports its answer. It imports nothing but
// the standard library's smallest parts (no net/http, no config, no
// Kubernetes client): it runs every few seconds in every pod, and its cost
// is the package initialisation of whatever binary links it.
package ask

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// DefaultSocket is the agent's Unix socket when probes.socket is not set.
const DefaultSocket = "/run/kolla-agent/agent.sock"

// DefaultTimeout bounds one question: shorter than the kubelet's default
// probe timeout of 1s.
const DefaultTimeout = 900 * time.Millisecond

// maxBody bounds what is read of an answer (one line per check).
const maxBody = 1 << 20

// path is the probe's endpoint; "" for a name that is no probe.
func path(name string) string {
	switch name {
	case "startup":
		return "/startupz"
	case "readiness":
		return "/readyz"
	case "liveness":
		return "/livez"
	}
	return ""
}

// Ask asks the agent on socket for the probe name (startup, readiness,
// liveness) and returns the answer's body and whether it passed (HTTP 200).
// An agent that does not answer is an error, and a failed probe.
//
// The request is HTTP/1.0: the agent's server then answers without chunked
// encoding and closes the connection, so the body is all that follows the
// headers.
func Ask(ctx context.Context, socket, name string, verbose bool) (body string, pass bool, err error) {
	p := path(name)
	if p == "" {
		return "", false, fmt.Errorf("unknown probe %q (want startup, readiness or liveness)", name)
	}
	if verbose {
		p += "?verbose"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return "", false, fmt.Errorf("no agent answering on %s: %v", socket, unwrap(err))
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, "GET "+p+" HTTP/1.0\r\nHost: agent\r\nUser-Agent: kolla-agent-probe\r\n\r\n"); err != nil {
		return "", false, fmt.Errorf("asking the agent on %s: %v", socket, unwrap(err))
	}
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil {
		return "", false, fmt.Errorf("the agent on %s did not answer: %v", socket, unwrap(err))
	}
	code, err := statusCode(status)
	if err != nil {
		return "", false, fmt.Errorf("the agent on %s: %v", socket, err)
	}
	for { // headers: nothing in them matters here
		line, err := r.ReadString('\n')
		if err != nil {
			return "", false, fmt.Errorf("the agent on %s: headers: %v", socket, unwrap(err))
		}
		if line == "\r\n" || line == "\n" {
			break
		}
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBody))
	if err != nil {
		return "", false, fmt.Errorf("the agent on %s: body: %v", socket, unwrap(err))
	}
	switch code {
	case 200:
		return string(b), true, nil
	case 503:
		return string(b), false, nil
	}
	return string(b), false, fmt.Errorf("the agent on %s answered %s", socket, strings.TrimSpace(status[strings.IndexByte(status, ' ')+1:]))
}

// statusCode reads "HTTP/1.x NNN reason".
func statusCode(line string) (int, error) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return 0, fmt.Errorf("not an HTTP answer: %q", strings.TrimSpace(line))
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 || code > 599 {
		return 0, fmt.Errorf("bad status line %q", strings.TrimSpace(line))
	}
	return code, nil
}

// unwrap drops the net.OpError layers that repeat the socket's path.
func unwrap(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}
