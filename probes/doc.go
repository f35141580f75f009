// Package probes answers the kubelet's startup, readiness and liveness
// probes for the service the agent stands beside.
//
// Checks run in the background, each on its own period with its own timeout,
// and leave their last result in memory; the HTTP handlers only read those
// results, so a probe costs no I/O and cannot hang. A result older than twice
// its check's period counts as failed, so a check that hangs never reports
// healthy, and a check that outlives its timeout is cancelled (an exec
// check's whole process group is killed).
//
// The rules (Kubernetes' meanings):
//   - startup passes once every startup check has passed once, and stays
//     passed; until then readiness fails with "starting";
//   - readiness passes when startup has, no gate is set (stopping,
//     draining, bootstrap, reload: see SetGate) and every readiness check
//     passes;
//   - liveness passes while the agent's own loop runs and every liveness check
//     passes. Dependencies (the database, the broker) are never part of
//     liveness unless a check says so: an outage of a shared dependency must
//     not restart every pod at once.
//
// The checks come from agent.yaml's probes: section (SpecsFrom, Listeners),
// built with the means the agent passes (Means).
//
// What it does not do: decide what the service is (the agent gives it a
// PIDSource), or act on a failure (the kubelet does).
package probes
