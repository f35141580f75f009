package discovery

import "fmt"

// State is what the last look at a dependency found.
type State string

const (
	// Waiting: the dependency is not there yet (NXDOMAIN, connection refused,
	// no ready endpoints, Job still running). Keep waiting.
	Waiting State = "waiting"
	// Unhealthy: the means of looking is broken (DNS SERVFAIL or timeout, API
	// server unreachable). Keep waiting, but say so: it is not "not found".
	Unhealthy State = "unhealthy"
	// Ready: the dependency is satisfied.
	Ready State = "ready"
	// Failed: the dependency can never be satisfied (the Job failed). The wait
	// ends at once.
	Failed State = "failed"
)

// Observation is one look at a dependency: its state and what was seen, in
// words an operator can act on ("NXDOMAIN for mariadb.openstack.svc.cluster.local.",
// "0 of 3 endpoints ready").
type Observation struct {
	State  State
	Detail string
}

func waiting(format string, args ...any) Observation {
	return Observation{State: Waiting, Detail: fmt.Sprintf(format, args...)}
}

func unhealthy(format string, args ...any) Observation {
	return Observation{State: Unhealthy, Detail: fmt.Sprintf(format, args...)}
}

func ready(format string, args ...any) Observation {
	return Observation{State: Ready, Detail: fmt.Sprintf(format, args...)}
}

func failed(format string, args ...any) Observation {
	return Observation{State: Failed, Detail: fmt.Sprintf(format, args...)}
}
