package agent

import (
	"context"
	"errors"
	"io"
	"regexp"

	"github.com/kolla-agent/kolla-agent/agent/logs"
)

// logsRun is the log-shipping duty of one `run` or `sidecar`: the sink,
// built once and kept across the duty's restarts (a forward connection and
// its chunks in flight), and the shipper's config.
type logsRun struct {
	cfg  logs.ShipperConfig
	sink io.Closer // nil: nothing to close (stdout)
}

// newLogsDuty builds the log shipping from the logs: section; nil without
// one. It ships from the start (the lines of the wait and the bootstrap
// too) until after the service has stopped: its turn in the shutdown
// comes after the service's, and drains what the service wrote last. What
// the section names but cannot be opened (a CA file) is a config error
// now, before the service starts, not a duty failing later.
func (s *session) newLogsDuty() (*duty, error) {
	lr, err := s.newLogs()
	if lr == nil || err != nil {
		return nil, err
	}
	return &duty{name: "logs", run: func(ctx context.Context) error {
		s.sideDuty(ctx, "logs", lr.run)
		lr.close() // the sink is kept across the shipper's restarts
		return nil
	}}, nil
}

func (s *session) newLogs() (*logsRun, error) {
	lc := s.Config.Logs
	if lc == nil {
		return nil, nil
	}
	fields := map[string]string{}
	for k, v := range map[string]string{"pod": s.PodName, "namespace": s.Namespace, "container": s.env("CONTAINER_NAME")} {
		if v != "" {
			fields[k] = v
		}
	}
	obs := logs.NewMetrics(s.registry, func(reason string) {
		if h := s.health.Load(); h != nil {
			h.SetDegraded("logs", reason)
		}
	})
	lr := &logsRun{cfg: logs.ShipperConfig{
		StateDir: s.path(lc.StateDir),
		MaxLine:  lc.MaxLineSize,
		Idle:     lc.Multiline.Idle.Duration(),
		Rescan:   lc.Rescan.Duration(),
		Drain:    lc.Drain.Duration(),
		Fields:   fields,
		Logger:   s.log,
		Observer: obs,
	}}
	for _, f := range lc.Files {
		lr.cfg.Files = append(lr.cfg.Files, logs.FileSpec{Glob: s.path(f.Path), Exclude: f.Exclude, Tag: f.Tag})
	}
	if lc.Multiline.FirstLine != "" {
		lr.cfg.FirstLine = regexp.MustCompile(lc.Multiline.FirstLine) // validated with the config
	}
	sk := lc.Sink
	sc := logs.SinkConfig{Type: sk.Type, Address: sk.Address, JSON: sk.Format == "json", SharedKey: sk.SharedKey, AckTimeout: lc.Sink.AckTimeout.Duration(), Hostname: s.PodName, Logger: s.log,
		OnHealth: func(err error) {
			if err != nil {
				obs.Failed(err)
			} else {
				obs.Recovered()
			}
		}}
	if sk.SharedKeyFile != "" {
		sc.SharedKeyFile = s.path(sk.SharedKeyFile)
	}
	if sk.TLS != nil {
		sc.TLS = &logs.SinkTLS{ServerName: sk.TLS.ServerName, InsecureSkipVerify: sk.TLS.InsecureSkipVerify}
		if sk.TLS.CAFile != "" {
			sc.TLS.CAFile = s.path(sk.TLS.CAFile)
		}
	}
	sink, closer, err := logs.NewSink(sc)
	if se := (*logs.SinkError)(nil); errors.As(err, &se) {
		return nil, configErr("%s: %s: %v", s.Source, se.Path("logs.sink"), se.Err)
	} else if err != nil {
		return nil, configErr("%s: logs.sink: %v", s.Source, err)
	}
	lr.cfg.Sink, lr.sink = sink, closer
	return lr, nil
}

// run ships until ctx ends, then drains: what the service wrote last is
// shipped before the agent exits (bounded by the shipper's Drain). A failed
// shipper (its state directory unwritable) is a side duty's failure,
// started again with backoff from the committed offsets.
func (lr *logsRun) run(ctx context.Context) error {
	sh, err := logs.NewShipper(lr.cfg)
	if err != nil {
		return err
	}
	return sh.Run(ctx)
}

func (lr *logsRun) close() {
	if lr.sink != nil {
		lr.sink.Close()
	}
}
