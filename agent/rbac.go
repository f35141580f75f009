package agent

import (
	"io"
	"os"
	"path/filepath"

	"github.com/kolla-agent/kolla-agent/agent/rbac"
)

// PrintRBAC writes the Role (and its RoleBinding to serviceAccount) that
// the config at the plan's source needs, as YAML.
func (a *Agent) PrintRBAC(o rbac.Options, serviceAccount string, w io.Writer) error {
	p, err := a.LoadPlan()
	if err != nil {
		return err
	}
	cfg := p.Config
	// Templates where the pod sees them, else beside agent.yaml (the same
	// ConfigMap holds them), as config check finds them.
	var templates []string
	srcs := []string{cfg.Bootstrap.Job}
	for _, it := range cfg.Render {
		srcs = append(srcs, it.Src)
	}
	for _, src := range srcs {
		if src == "" {
			continue
		}
		for _, path := range []string{a.path(src), filepath.Join(filepath.Dir(p.Source), filepath.Base(src))} {
			if b, err := os.ReadFile(path); err == nil {
				templates = append(templates, string(b))
				break
			}
		}
	}
	own, others := rbac.Rules(cfg, p.Namespace, templates, o)
	return rbac.Write(w, rbac.Subject{Source: p.Source, ServiceAccount: serviceAccount, Namespace: p.Namespace}, own, others)
}
