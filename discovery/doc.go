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
// seconds (kube.go, follow.go). A refusal by RBAC is told once and worked
// around where a narrower request can do (a GET by name for a LIST).
//
// The package imports no other package of the project: the agent, the
// probes (the dependency check) and the examples' demo use it alike.
package discovery
