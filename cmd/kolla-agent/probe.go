package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/probes"
)

// probe is `kolla-agent probe startup|readiness|liveness`: exit 0 when the
// running agent says the probe passes, 1 otherwise (also when no agent
// answers), printing its answer.
func probe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kolla-agent probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the agent's Unix `PATH` (default: probes.socket of the config, else "+config.DefaultProbeSocket+")")
	cfgPath := fs.String("config", os.Getenv("KOLLA_AGENT_CONFIG"), "agent config `PATH`, read only for probes.socket")
	verbose := fs.Bool("verbose", false, "print one line per check")
	timeout := fs.Duration("timeout", probes.AskTimeout, "how long to wait for the agent's answer")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: kolla-agent probe startup|readiness|liveness [--socket PATH] [--verbose]\n\n")
		fs.PrintDefaults()
	}
	// The probe name may come before or after the flags.
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if name == "" && fs.NArg() > 0 {
		// flags, then the name, then maybe more flags
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return flagExit(err)
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kolla-agent probe: unexpected arguments %q\n", fs.Args())
		return exitConfig
	}
	p, err := probes.ParseProbe(name)
	if err != nil {
		fmt.Fprintf(stderr, "kolla-agent probe: %v\n", err)
		return exitConfig
	}
	path := *socket
	if path == "" {
		path = socketFromConfig(*cfgPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	body, pass, err := probes.Ask(ctx, path, p, *verbose)
	if err != nil {
		fmt.Fprintf(stderr, "kolla-agent probe %s: %v\n", p, err)
		return 1
	}
	fmt.Fprint(stdout, body)
	if !pass {
		return 1
	}
	return exitOK
}

// socketFromConfig reads probes.socket and nothing else; any trouble (no
// file, bad YAML) means the default, and the agent's own validation of the
// file is where errors are reported.
func socketFromConfig(path string) string {
	if path == "" {
		path = config.DefaultPath
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return config.DefaultProbeSocket
	}
	var c struct {
		Probes struct {
			Socket string `json:"socket"`
		} `json:"probes"`
	}
	if yaml.Unmarshal(b, &c) != nil || c.Probes.Socket == "" || c.Probes.Socket == "off" {
		return config.DefaultProbeSocket
	}
	return c.Probes.Socket
}
