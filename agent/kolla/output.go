package kolla

import (
	"fmt"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// Output is the service's whole config rendered in memory: kolla's plan
// (nil outside kolla mode) and agent.yaml's templates (agent/render). Nothing is written until
// Commit.
type Output struct {
	Kolla     *Config // kolla's config.json; nil outside kolla mode
	Plan      *Plan
	Applied   bool // the plan is on disk already
	Templates []render.RenderedTemplate
}

// Files is every file the config writes, kolla's then the templates'.
func (o *Output) Files() []render.File {
	var out []render.File
	if o.Plan != nil {
		out = o.Plan.Files()
	}
	return append(out, render.TemplateFiles(o.Templates)...)
}

// Commit writes it: kolla's plan (all or nothing), then the templates,
// each atomically.
func (o *Output) Commit() error {
	if o.Plan != nil && !o.Applied {
		if err := o.Plan.Apply(); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	if err := render.WriteTemplates(o.Templates); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	return nil
}

// Differences is what differs between the output and the disk (kolla's
// Check and the templates'), or with dryRun what writing it would change
// (kolla's Changes).
func (o *Output) Differences(dryRun bool) ([]render.Difference, error) {
	var diffs []render.Difference
	var err error
	switch {
	case o.Plan == nil:
	case dryRun:
		diffs, err = o.Plan.Changes()
	default:
		diffs, err = o.Plan.Check()
	}
	if err != nil {
		return nil, err
	}
	return append(diffs, render.CheckTemplates(o.Templates)...), nil
}
