// Package configcheck is `kolla-agent config check`: agent.yaml, kolla's
// config.json and the templates they name, validated without a cluster and
// without a write, every problem at once.
package configcheck

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/kolla"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/probes/ask"
)

// Options is what `kolla-agent config check` looks at.
type Options struct {
	// Root prefixes every absolute path of the pod's filesystem (--root).
	Root string
	// Config is agent.yaml's path ("" = the default path, and the embedded
	// default when there is nothing there).
	Config string
	// Kolla is kolla's config.json ("" = the one in the kolla config dir,
	// when there is one).
	Kolla string
}

// CheckConfig validates agent.yaml, kolla's config.json and the templates
// they name, touching nothing (no cluster, no writes), and writes to w what
// the agent would do. The error lists every problem found, one per line,
// each naming its file and field; it is an *Error.
//
// A template is looked for where the pod sees it (under --root), then beside
// agent.yaml under its base name: in the kolla-kubernetes layout both come
// from the same ConfigMap, so a check on a workstation still parses them.
func Check(o Options, w io.Writer) error {
	var problems []string
	add := func(err error) { problems = append(problems, config.Problems(err)...) }

	var cfg *config.Config
	path, source, b, err := config.Read(o.Root, o.Config)
	switch {
	case err != nil:
	case b == nil:
		cfg, err = config.Default()
		source = "(embedded default: no " + config.DefaultPath + ")"
	default:
		cfg, err = config.Inspect(path, b)
	}
	if err != nil {
		add(err)
	}

	var kc *kolla.Config
	kollaPath := o.Kolla
	if kollaPath == "" {
		if p, err := kolla.Find(o.Root); err == nil {
			kollaPath = p
		} else if !errors.Is(err, fs.ErrNotExist) {
			add(err)
		}
	}
	if kollaPath != "" {
		if kc, err = kolla.Load(kollaPath); err != nil {
			add(err)
		}
	}

	beside := filepath.Dir(path)
	if cfg != nil {
		for i, r := range cfg.Render {
			if err := checkTemplate(o.Root, r.Src, beside); err != nil {
				add(fmt.Errorf("%s: render[%d].src: %w", source, i, err))
			}
		}
		if j := cfg.Bootstrap.Job; j != "" {
			if err := checkTemplate(o.Root, j, beside); err != nil {
				add(fmt.Errorf("%s: bootstrap.job: %w", source, err))
			}
		}
	}
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	summarize(w, source, cfg, kollaPath, kc)
	return nil
}

// checkTemplate parses the template at src (the pod's path, or its base name
// beside agent.yaml); one that is in neither place is not an error here:
// the pod's volumes are not on this machine.
func checkTemplate(root, src, beside string) error {
	for _, p := range []string{render.UnderRoot(root, src), filepath.Join(beside, filepath.Base(src))} {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		return render.ParseTemplate(p, b)
	}
	return nil
}

// summarize writes what the agent would do with cfg, one duty per paragraph.
func summarize(w io.Writer, source string, c *config.Config, kollaPath string, kc *kolla.Config) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("config: %s: valid", source)
	if kc != nil {
		p("kolla config: %s: valid; %d config_files, %d directories, %d files, %d permissions", kollaPath, len(kc.ConfigFiles), len(kc.Directories), len(kc.Files), len(kc.Permissions))
		if kc.Command != "" {
			p("  command: %s", kc.Command)
		}
	}
	if n := len(c.Dependencies.Wait); n > 0 {
		p("dependencies: %d, within %s", n, c.Dependencies.Timeout.Duration())
		for _, d := range c.Dependencies.Wait {
			extra := ""
			if d.Timeout.IsSet() {
				extra = " (within " + d.Timeout.String() + ")"
			}
			p("  %s%s", d.Wait, extra)
		}
	} else {
		p("dependencies: none")
	}
	if len(c.Render) > 0 {
		p("render: %d templates", len(c.Render))
		for _, r := range c.Render {
			p("  %s -> %s%s", r.Src, r.Dest, ownerPerm(r.Owner, r.Perm))
		}
	}
	run := c.Run.Command
	if run == "" && kc != nil {
		run = kc.Command + " (kolla's)"
	}
	if run == "" {
		run = "the command after --"
	}
	supervise := c.Run.Supervise
	if supervise == "" {
		supervise = "auto"
	}
	p("run: %s; supervise %s; grace %s", run, supervise, c.Run.Grace.Duration())
	if b := c.Bootstrap; b.Enabled() {
		p("bootstrap: %s mode, name %s, within %s", b.Mode, b.Name, b.Timeout.Duration())
		if b.Job != "" {
			p("  job template: %s", b.Job)
		}
		if b.Command != "" {
			p("  command: %s", b.Command)
		}
		for _, j := range b.Jobs {
			p("  waits for job %s", j)
		}
		for _, ph := range b.Phases {
			when := "before the service starts"
			if ph.Later() {
				when = "after the rollout"
			}
			p("  phase %s: %s", ph.Name, when)
		}
		if e := b.Endpoints; e != nil {
			p("  registers %s (%s) in the Keystone catalog", e.Name, e.Type)
		}
	} else {
		p("bootstrap: none")
	}
	if len(c.Probes.Checks) > 0 {
		addr, sock := c.Probes.Address, c.Probes.Socket
		if addr == "" {
			addr = config.DefaultProbeAddress
		}
		if sock == "" {
			sock = ask.DefaultSocket
		}
		p("probes: http %s, socket %s; %d checks", addr, sock, len(c.Probes.Checks))
		if c.Probes.DrainFile != "" {
			p("  drain file: %s", c.Probes.DrainFile)
		}
		for i := range c.Probes.Checks {
			ch := &c.Probes.Checks[i]
			p("  %s: %s for %s, every %s within %s", ch.Name, checkType(ch), strings.Join(ch.ProbeList(), ", "), ch.Period.Duration(), ch.Timeout.Duration())
		}
	} else {
		p("probes: none")
	}
	if r := c.Reload; r != nil {
		quiet, verify := r.Quiet.Duration(), r.VerifyTimeout.Duration()
		watch := "the kolla config dir and the templates' directories"
		if len(r.Watch) > 0 {
			watch = strings.Join(r.Watch, ", ")
		}
		action := r.ActionFor("")
		if action == "signal" {
			sig := strings.ToUpper(r.Signal)
			if sig == "" {
				sig = config.DefaultReloadSignal
			}
			action += " " + sig
		}
		p("reload: watches %s; action %s after %s quiet; verified within %s", watch, action, quiet, verify)
		for _, x := range r.Actions {
			p("  %s: %s", x.Path, x.Action)
		}
		for _, v := range r.Validate {
			p("  validates %s with: %s", v.Dest, v.Command)
		}
	} else {
		p("reload: off")
	}
	if l := c.Logs; l != nil {
		sink := l.Sink.Type
		if l.Sink.Address != "" {
			sink += " " + l.Sink.Address
		}
		p("logs: %d file patterns to %s; offsets in %s", len(l.Files), sink, l.StateDir)
		for _, f := range l.Files {
			p("  %s", f.Path)
		}
	} else {
		p("logs: off")
	}
}

func ownerPerm(owner, perm string) string {
	var s []string
	if owner != "" {
		s = append(s, "owner "+owner)
	}
	if perm != "" {
		s = append(s, "mode "+perm)
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

// checkType names a check's type and its target.
func checkType(ch *config.Check) string {
	kind := strings.Join(ch.Types(), "+") // one in a valid config
	switch {
	case ch.TCP != nil:
		return kind + " " + ch.TCP.Address
	case ch.HTTP != nil:
		if u, err := url.Parse(ch.HTTP.URL); err == nil {
			return kind + " " + u.Redacted()
		}
	case ch.Connections != nil:
		return fmt.Sprintf("%s to ports %v", kind, ch.Connections.Ports)
	case ch.File != nil:
		return kind + " " + ch.File.Path
	case ch.Dependency != nil:
		return kind + " " + ch.Dependency.Wait
	case ch.RPC != nil:
		return kind + " topic " + ch.RPC.Topic
	}
	return kind
}

// Error is every problem found, one per line.
type Error struct{ Problems []string }

func (e *Error) Error() string { return strings.Join(e.Problems, "\n") }
