// Package testenv runs a real, local Kubernetes control plane for tests:
// etcd, kube-apiserver, kube-controller-manager and CoreDNS, as separate
// processes on loopback ports, with binaries built by hack/install-tools.sh.
// etcd is EtcdVersion (3.6, built from its Go module) unless TESTENV_ETCD
// picks another (EtcdEnv), such as Debian's 3.4; Env.Etcd says which runs.
//
// What it guarantees:
//   - Start returns only when the API server is ready, the ServiceAccount
//     machinery works and CoreDNS answers from the API; every component
//     listens on 127.0.0.1 only, on ports no other instance shares.
//   - Stop stops exactly the processes it started, by PID (each leads a
//     process group of its own, which is signalled; an adopted one alone);
//     children of a crashed test process die with it (parent-death signal),
//     except for StartDetached, which hack/testenv uses.
//   - The real controllers do their real work: with the Kubelet stand-in
//     reporting pod status, the Job controller completes Jobs, the
//     EndpointSlice controller publishes endpoints and CoreDNS serves them.
//   - The agent's credentials come from the shipped RBAC example and the
//     TokenRequest API (AgentKubeconfig), never from the admin token.
//
// By default there is no scheduler, kubelet or container runtime (no pod
// ever runs), no kube-proxy (Service IPs route nowhere), no node lifecycle or
// volume controllers, and nothing is reachable from outside the machine.
//
// With Options.Node (StartWith; root only, one per machine; MainNode for a
// test package) a real node runs too: containerd 2 with runc and the CNI
// bridge, the kubelet, kube-proxy and kube-scheduler; the API server and
// CoreDNS also listen on the node's bridge address (NodeIP), the
// ServiceAccount and NodeRestriction admission plugins and the Node
// authorizer are on, and the node lifecycle and PersistentVolume binder
// controllers run (a test makes hostPath volumes for the claims). Before any
// component starts, the host's state is recorded and a guard keeps the pod
// and Service ranges on the machine; Stop puts every sysctl, iptables rule,
// mount, link, cgroup and path back and fails if the host differs.
//
// Typical use, one control plane per test package:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { testenv.Main(m, func(e *testenv.Env) { env = e }) }
//
//	func TestX(t *testing.T) {
//		ns := env.Namespace(t)
//		kubeconfig, err := env.AgentKubeconfig(ctx, ns)
//		...
//	}
package testenv
