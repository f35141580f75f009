package agent

import (
	"context"

	"github.com/kolla-agent/kolla-agent/agent/reload"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/probes"
)

// newReloadDuty is the reload (reload: in agent.yaml; else nil) of the
// service h, verified by health's readiness. Under run the service started
// with the render just committed; in sidecar mode with what is on disk. It
// starts once the service runs, and ends at SIGTERM, before the service is
// stopped.
func (s *session) newReloadDuty(h *serviceHandle, health *probes.Health) (*duty, error) {
	if s.Config.Reload == nil {
		return nil, nil
	}
	var files []render.File
	var kollaMode bool // its config dir is watched too
	if s.rendered != nil {
		files, kollaMode = s.rendered.Files(), s.rendered.Kolla != nil
	} else {
		kc, err := s.kollaConfig()
		if err != nil {
			return nil, err
		}
		kollaMode = kc != nil
	}
	rd, err := reload.NewDuty(s.Config, reload.Means{
		Render: s.renderConfig, Files: files, Kolla: kollaMode,
		Signal: h.signal, Restart: h.restart, Spawner: h.spawner, Env: h.env, Health: health,
		Kube: s.kubeClient, Namespace: s.Namespace, PodName: s.PodName, Identity: s.podIdentity,
		Event: func(typ, reason, msg string) error {
			kube, err := s.kubeClient()
			if err != nil {
				return nil // no API client: no Event (the pass is logged anyway)
			}
			return s.post(kube, event{typ, reason, msg})
		},
		Root: s.opts.Root, Logger: s.log, Registry: s.registry,
	})
	if err != nil {
		return nil, err
	}
	return &duty{name: "reload", early: true, run: func(ctx context.Context) error {
		if !h.started(ctx) {
			<-ctx.Done()
			return nil
		}
		s.sideDuty(ctx, "reload", rd.Run)
		return nil
	}}, nil
}
