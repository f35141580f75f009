package main

import (
	"io"

	"github.com/kolla-agent/kolla-agent/probes/ask"
)

// probe is `kolla-agent probe startup|readiness|liveness`: exit 0 when the
// running agent says the probe passes, 1 otherwise (also when no agent
// answers), printing its answer. The same client as kolla-agent-probe.
func probe(args []string, stdout, stderr io.Writer) int {
	return ask.Command("kolla-agent probe", args, stdout, stderr, ask.SocketFromConfig)
}
