package probes

import (
	"context"

	"github.com/kolla-agent/kolla-agent/probes/ask"
)

// Ask is the exec-probe client (package ask): it asks the agent listening
// on socket for probe p and returns the answer's body and whether it
// passed. An agent that does not answer is an error (and a failed probe).
func Ask(ctx context.Context, socket string, p Probe, verbose bool) (body string, pass bool, err error) {
	return ask.Ask(ctx, socket, p.String(), verbose)
}

// AskTimeout is the client's bound when the caller gives none: shorter than
// the kubelet's default probe timeout of 1s.
const AskTimeout = ask.DefaultTimeout
