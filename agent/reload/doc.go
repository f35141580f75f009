// Package reload takes a running service from one rendered config to the
// next when a mounted ConfigMap or Secret changes, without a half-applied
// config.
//
// A Watcher (watch.go) watches the volumes' directories with inotify,
// triggers on the kubelet swapping a volume's ..data link (or, for a plain
// directory, on any change), rescans them now and then whatever inotify
// said, and coalesces a burst of changes into one Burst.
//
// A Reloader (pipeline.go) then runs one pass: render the whole config in
// memory; compare it with the running one (unchanged: done); stage it in
// the state directory (state.go) and check it, first its syntax
// (syntax.go: JSON, YAML, oslo.config's INI through osloconf), then the
// operator's validators; commit it (each file atomically, all undone on a
// failure); act (a signal, a restart, a rollout: the caller's Act, bounded
// by its Hold); verify that the service is ready again, and roll back to the
// last good set when it is not. Every outcome is reported and remembered: a
// set rejected or rolled back is not tried again until it changes. The
// state directory keeps what survives an agent killed mid-pass.
//
// APISource (apisource.go, reload.source: api) watches the ConfigMap behind
// each volume through a ConfigMapAPI and keeps a copy of it, written by
// WriteVolume (shadow.go) in the kubelet's own layout, so that a change is
// taken before the kubelet has it; the volume stays the fallback.
//
// A Duty (duty.go) is the reload of one `run` or `sidecar`, built from
// agent.yaml's reload: section: it runs the Watcher, the APISource and a
// pass per burst, acts (a signal or restart through the service's
// Signaller, a rollout through bootstrap.Rollout), waits for its turn among
// the replicas (HoldSlot over bootstrap's Leases), and reports to readiness,
// Events and Metrics. What it needs of the agent (the render, the service,
// its Health, the API client, Events) reaches it in Means; the agent only
// starts it once the service runs and restarts it when it fails.
package reload
