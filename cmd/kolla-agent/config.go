package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/kolla-agent/kolla-agent/agent"
	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/configcheck"
	"github.com/kolla-agent/kolla-agent/agent/rbac"
)

// configCommand is `kolla-agent config check|schema|rbac`: it reads files and
// prints, nothing else (no logger, no cluster).
func configCommand(g globals, args []string, stdout, stderr io.Writer) int {
	sub := ""
	if len(args) > 0 {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("kolla-agent config "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.register(fs)
	var kolla, owner, configMaps, sa string
	switch sub {
	case "rbac":
		fs.StringVar(&owner, "owner", "", "the pod's workload, `KIND/NAME` (deployment/keystone-api): reload's rollout and later bootstrap phases reach it only")
		fs.StringVar(&configMaps, "configmaps", "", "the ConfigMaps of the pod's volumes, `A,B` (reload source api), watched by name")
		fs.StringVar(&sa, "service-account", "kolla-agent", "the ServiceAccount the RoleBinding binds")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent config rbac [--config PATH] [--owner KIND/NAME] [--configmaps A,B] [--service-account NAME]\n\nPrints the Role and RoleBinding this agent.yaml needs: the least, with resourceNames wherever the agent knows the object's name.\n\n")
			fs.PrintDefaults()
		}
	case "check":
		fs.StringVar(&kolla, "kolla-config", "", "kolla's config.json `PATH` (default: the one in /var/lib/kolla/config_files, if any)")
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent config check [--config PATH] [--kolla-config PATH]\n\nValidates agent.yaml, kolla's config.json and the templates they name without touching anything;\nprints every problem with its file and field (exit 1), or a summary of what the agent would do (exit 0).\n\n")
			fs.PrintDefaults()
		}
	case "schema":
		fs.Usage = func() {
			fmt.Fprint(stderr, "Usage: kolla-agent config schema\n\nPrints the JSON Schema of agent.yaml.\n")
		}
	default:
		fmt.Fprintf(stderr, "kolla-agent config: want check, schema or rbac, not %q\n", sub)
		return exitConfig
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kolla-agent config %s: unexpected arguments %q\n", sub, fs.Args())
		return exitConfig
	}
	if sub == "schema" {
		stdout.Write(config.Schema())
		return exitOK
	}
	a := agent.New(agent.Options{ConfigPath: g.config, Root: g.root, Version: version})
	if sub == "rbac" {
		var cms []string
		if configMaps != "" {
			cms = strings.Split(configMaps, ",")
		}
		if err := a.PrintRBAC(rbac.Options{Owner: owner, ConfigMaps: cms}, sa, stdout); err != nil {
			fmt.Fprintf(stderr, "kolla-agent config rbac: %v\n", err)
			return exitConfig
		}
		return exitOK
	}
	err := configcheck.Check(configcheck.Options{Root: g.root, Config: g.config, Kolla: kolla}, stdout)
	if err == nil {
		return exitOK
	}
	var cerr *configcheck.Error
	if !errors.As(err, &cerr) {
		fmt.Fprintf(stderr, "kolla-agent config check: %v\n", err)
		return exitConfig
	}
	n := 0
	for _, l := range config.Problems(err) {
		fmt.Fprintln(stderr, l)
		n++
		if m := moreProblems.FindStringSubmatch(l); m != nil { // "FILE: and 7 more"
			more, _ := strconv.Atoi(m[1])
			n += more - 1
		}
	}
	s := "s"
	if n == 1 {
		s = ""
	}
	fmt.Fprintf(stderr, "%d problem%s: nothing was changed\n", n, s)
	return exitConfig
}

// moreProblems is the line that counts the problems past those listed.
var moreProblems = regexp.MustCompile(`: and (\d+) more$`)
