package probes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Ask is the exec-probe client: it asks the agent listening on socket for
// probe p and returns the answer's body and whether it passed. An agent that
// does not answer is an error (and a failed probe). It reads nothing else:
// no config, no Kubernetes client.
func Ask(ctx context.Context, socket string, p Probe, verbose bool) (body string, pass bool, err error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	path := map[Probe]string{Startup: "/startupz", Readiness: "/readyz", Liveness: "/livez"}[p]
	if verbose {
		path += "?verbose"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return "", false, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		if ue, ok := err.(interface{ Unwrap() error }); ok {
			err = ue.Unwrap()
		}
		return "", false, fmt.Errorf("no agent answering on %s: %v", socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", false, fmt.Errorf("reading the agent's answer on %s: %v", socket, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return string(b), true, nil
	case http.StatusServiceUnavailable:
		return string(b), false, nil
	}
	return string(b), false, fmt.Errorf("agent on %s answered %s", socket, resp.Status)
}

// AskTimeout is the client's bound when the caller gives none: shorter than
// the kubelet's default probe timeout of 1s.
const AskTimeout = 900 * time.Millisecond
