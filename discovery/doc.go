// Package discovery waits for a pod's dependencies, as kubernetes-entrypoint
// does and with the same spellings, and finds where services are exposed.
//
// A Dependency (spec.go: Parse) is one thing to wait for, by Kind: a DNS
// name or SRV record (asked of the cluster's DNS with its own Resolver,
// dns.go, not the libc one), a TCP port, an HTTP(S) URL, a file or Unix
// socket, a Service with ready endpoints, a Job that succeeded, a
// DaemonSet's pod ready on this node, pods or containers by label, any API
// object by field or condition (resource.go), or a Service's public address
// (exposure.go). A Waiter (discovery.go: New, Wait) checks them all at
// once, each with its own back-off, and reports every change of State
// (observe.go) to its caller and to metrics (metrics.go).
//
// The API server is reached through Kube (client.go): dynamic clients and
// the few fields each check reads (objects.go), watched, not polled, so a
// waiting pod costs the API server a watch rather than a request every few
// seconds (kube.go, follow.go). A verb RBAC refuses is told once and worked
// around: a refused watch polls with LIST, a refused list of one object by
// name polls with GET, every 2 s, as kubernetes-entrypoint does.
//
// Of the project it imports only redact (a dependency's URL in errors,
// logs and metric labels hides its credentials) and retry (its back-off):
// the agent, the probes (the dependency check) and the examples' demo use
// it alike.
package discovery
