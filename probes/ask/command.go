package ask

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Command is the exec-probe client's command line, the same for
// `kolla-agent probe` and `kolla-agent-probe`: PROBE [--socket PATH]
// [--config PATH] [--verbose] [--timeout D], the probe's name before or
// after the flags. It prints the agent's answer and returns the exit code:
// 0 the probe passes, 1 it fails or no agent answers (a bad command line is
// 1 too, as for the kubelet any non-zero code is a failure). socketOf gives
// the socket when --socket is not given, from the config's path ("" when
// neither --config nor KOLLA_AGENT_CONFIG is set).
func Command(prog string, args []string, stdout, stderr io.Writer, socketOf func(config string) string) int {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the agent's Unix `PATH` (default: probes.socket of the config, else "+DefaultSocket+")")
	config := fs.String("config", os.Getenv("KOLLA_AGENT_CONFIG"), "agent config `PATH`, read only for probes.socket")
	verbose := fs.Bool("verbose", false, "print one line per check")
	timeout := fs.Duration("timeout", DefaultTimeout, "how long to wait for the agent's answer")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s startup|readiness|liveness [--socket PATH] [--verbose]\n\n", prog)
		fs.PrintDefaults()
	}
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	if name == "" && fs.NArg() > 0 {
		// flags, then the name, then maybe more flags
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 1
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", prog, fs.Args())
		return 1
	}
	if path(name) == "" {
		fmt.Fprintf(stderr, "%s: unknown probe %q (want startup, readiness or liveness)\n", prog, name)
		return 1
	}
	sock := *socket
	if sock == "" {
		sock = socketOf(*config)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	body, pass, err := Ask(ctx, sock, name, *verbose)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, name, err)
		return 1
	}
	fmt.Fprint(stdout, body)
	if !pass {
		return 1
	}
	return 0
}
