// Command kolla-agent-probe is the exec-probe client on its own: the same
// command line as `kolla-agent probe`, in a binary that links nothing but
// the client (about a tenth of the agent's size), so that the kubelet's exec
// probe, run every few seconds in every pod, starts in a few milliseconds
// and a few MiB. The agent's own `probe` command pays for initialising
// every package the agent links.
package main

import (
	"os"

	"github.com/kolla-agent/kolla-agent/probes/ask"
)

func main() {
	os.Exit(ask.Command("kolla-agent-probe", os.Args[1:], os.Stdout, os.Stderr, ask.SocketFromConfig))
}
