// Command kolla-agent-probe is the exec-probe client on its own: the same
// command line as `kolla-agent probe`, in a binary that links nothing but
// the client (about a tenth of the agent's size), so that the kubelet's exec
// probe, run every few seconds in every pod, starts in a few milliseconds
// and a few MiB. The agent's own `probe` command pays for initialising
// every package the agent links.
package main

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/kolla-agent/kolla-agent/probes/ask"
)

func main() {
	// Run by the kubelet in the agent's container: a process of the
	// service's uid in a shared process namespace must not reach that
	// container's files (its API token) through /proc/PID/root while it
	// runs. A refusal (seccomp) changes nothing else.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	os.Exit(ask.Command("kolla-agent-probe", os.Args[1:], os.Stdout, os.Stderr, ask.SocketFromConfig))
}
