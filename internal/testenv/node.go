package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/proc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The node's components: process names in the pids file and log names.
const (
	Scheduler   = "kube-scheduler"
	Containerd  = "containerd"
	KubeletName = "kubelet"
	KubeProxy   = "kube-proxy"
)

// The node's network. Pods live on a bridge of the node's own; the API
// server and CoreDNS listen on its gateway address too, which is the node's
// InternalIP, so the kubernetes and kube-dns Services have a real endpoint
// for kube-proxy to route to. Nothing routes these ranges off the machine:
// guardRules rejects them on every other interface.
const (
	// NodeName is the node's name and hostname label.
	NodeName = "kolla-node"
	// NodeBridge is the pods' bridge.
	NodeBridge = "kollanode0"
	// NodeIP is the bridge's address: the node's InternalIP, the pods'
	// gateway and where the control plane listens for them.
	NodeIP      = "10.244.0.1"
	podSubnet   = "10.244.0.0/24"
	podRange    = "10.244.0.0/16"
	serviceIPs  = "10.96.0.0/12"
	dnsIP       = "10.96.0.10"
	guardChain  = "KOLLA-TESTENV-GUARD"
	podChain    = "KOLLA-TESTENV-PODS"
	nodeLock    = "/run/kolla-agent-testenv-node"
	dirNode     = "node"
	fileHost    = "host.json"
	cniBinDir   = "/usr/lib/cni"
	runcBinary  = "/usr/sbin/runc"
	kubeletPort = 10250
)

// SandboxImage is the pod sandbox ("pause") image the node's containerd
// pins: a static program built from internal/testenv/cmd/pause.
const SandboxImage = "localhost/testenv-pause:1"

// Options says what Start runs besides the control plane.
type Options struct {
	// Node runs a real node as well: containerd with runc, the kubelet,
	// kube-proxy and kube-scheduler. It needs root and changes the host
	// (a bridge, iptables rules, sysctls, mounts, cgroups), all of which
	// Stop puts back. One node per machine.
	Node bool
	// SyncFrequency is the kubelet's syncFrequency, which bounds how late
	// a ConfigMap edit reaches a pod's volume (default 10s; the kubelet's
	// own default is 1m).
	SyncFrequency time.Duration
	// Detach is StartDetached's: processes outlive the caller.
	Detach bool
	// Profiling serves kube-apiserver's /debug/pprof (off otherwise, as
	// hardened clusters run it): benchmarks read its live heap there.
	Profiling bool
}

// NodeMissing says why a node cannot run here, or "" when it can: tests
// that need one skip with this reason.
func NodeMissing() string {
	if os.Geteuid() != 0 {
		return "the node (kubelet, containerd, runc) needs root"
	}
	for _, name := range []string{Scheduler, Containerd, KubeletName, KubeProxy, "containerd-shim-runc-v2", "ctr"} {
		if _, err := os.Stat(filepath.Join(BinDir(), name)); err != nil {
			return fmt.Sprintf("%s is not built (run hack/install-tools.sh node)", name)
		}
	}
	for _, p := range []string{runcBinary, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("%s is missing (run hack/install-tools.sh node)", p)
		}
	}
	for _, cmd := range []string{"iptables", "ip6tables", "iptables-save", "ip"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Sprintf("%s is missing (run hack/install-tools.sh node)", cmd)
		}
	}
	return ""
}

func nodeComponents() []string { return []string{Scheduler, Containerd, KubeletName, KubeProxy} }

func (e *Env) nodePath(name string) string { return filepath.Join(e.Dir, dirNode, name) }

// KubeletRootDir is the node's kubelet --root-dir: its pods' volumes are
// under pods/<uid>/volumes.
func (e *Env) KubeletRootDir() string { return e.nodePath("kubelet") }

func (e *Env) containerdSocket() string { return e.nodePath("containerd.sock") }

// lockNode claims the machine's one node for this Env, refusing when
// another Env's node still runs.
//
// The other Env holds the node from the moment it records the host's state
// (its host.json) until Stop has put the host back and removed that file,
// whether or not its processes still run: a node that crashed must be
// brought down (its host state restored) before another starts. One case is
// brought down here instead of refused: a node abandoned whole, its starter
// and every component dead (a run killed with its process group, as a CI
// job at its time limit). Nothing is left to ask, and refusing would fail
// every later run on the machine.
func (e *Env) lockNode() error {
	for range 3 {
		// O_EXCL: of two Envs starting at once, one gets the lock.
		f, err := os.OpenFile(nodeLock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, werr := fmt.Fprintf(f, "%s\n%s\n", e.Dir, processID(os.Getpid()))
			return errors.Join(werr, f.Close())
		}
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		b, err := os.ReadFile(nodeLock)
		if err != nil {
			continue // removed meanwhile
		}
		other, owner := parseNodeLock(b)
		if other == e.Dir {
			return nil
		}
		if _, err := os.Stat(filepath.Join(other, fileHost)); err == nil {
			if !abandoned(other, owner) {
				return fmt.Errorf("a node already runs on this machine, started in %s (stop it with hack/testenv down %s)", other, other)
			}
			if err := bringDownAbandoned(other); err != nil {
				return err
			}
			continue
		}
		// Stale: its Env put the host back, or its directory is gone.
		if err := os.Remove(nodeLock); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return fmt.Errorf("could not take the node lock %s", nodeLock)
}

// parseNodeLock reads the lock: the holder's directory, then the identity
// of the process that took it (processID; absent in older locks).
func parseNodeLock(b []byte) (dir, owner string) {
	dir, rest, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(dir), strings.TrimSpace(rest)
}

// nodeLockHolder is the directory of the Env holding the node, "" if none.
func nodeLockHolder() string {
	b, err := os.ReadFile(nodeLock)
	if err != nil {
		return ""
	}
	dir, _ := parseNodeLock(b)
	return dir
}

// processID names a process by its PID and start time, which a recycled
// PID does not share; "" if the process is gone.
func processID(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// Fields after the parenthesised command name: state is the first,
	// starttime (field 22 of the whole line) the twentieth.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return strconv.Itoa(pid) + " " + f[19]
}

// abandoned reports whether the node started in dir has nobody left: the
// process that took the lock is gone and no live process names dir on its
// command line (every component does, recorded or restarted since). The
// containerd shims are left out: they outlive containerd by design, and
// bringing the node down kills them.
func abandoned(dir, owner string) bool {
	if pid, _, ok := strings.Cut(owner, " "); ok {
		if n, err := strconv.Atoi(pid); err == nil && processID(n) == owner {
			return false
		}
	}
	pids, err := Running(dir)
	if err != nil {
		return false
	}
	for _, pid := range pids {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && !bytes.Contains(cmdline, []byte("containerd-shim")) {
			return false
		}
	}
	return true
}

// BringDownAbandoned brings down the node a killed run left behind, if
// there is one (see lockNode), and does nothing otherwise. The next Env
// would bring it down anyway; a test that records the host before it starts
// a node calls this first, or its record holds the abandoned node's pods,
// links and cgroups, which that start then removes.
func BringDownAbandoned() error {
	b, err := os.ReadFile(nodeLock)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	other, owner := parseNodeLock(b)
	if _, err := os.Stat(filepath.Join(other, fileHost)); err != nil || !abandoned(other, owner) {
		return nil
	}
	return bringDownAbandoned(other)
}

// AbandonNode does to the Env in dir what a run killed with its process
// group does: SIGKILL to every process naming dir (alive), none of Stop.
// It returns once none is left: a test of BringDownAbandoned sets up its
// case with it.
func AbandonNode(dir string) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		pids, err := Running(dir)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes naming %s still run 30s after SIGKILL", len(pids), dir)
		}
	}
}

func bringDownAbandoned(dir string) error {
	if err := bringDown(dir); err != nil {
		return fmt.Errorf("a node abandoned in %s (its starter and components are gone): bringing it down: %w (try hack/testenv down %s)", dir, err, dir)
	}
	return nil
}

// bringDown does what hack/testenv down does for a node whose Env cannot
// be opened whole (it may have died before writing its pids): stop what it
// recorded, kill its pods and shims, and restore the host it recorded.
func bringDown(dir string) error {
	e := newEnv(dir, "", false)
	e.node = true
	if pids, err := readPids(e.path(filePids)); err == nil {
		for _, pe := range pids {
			if p := adopt(pe.name, pe.pid, dir, e.path(pe.name+".log")); p != nil {
				e.procs[pe.name] = p
			}
		}
	}
	return e.Stop()
}

func unlockNode(dir string) error {
	if nodeLockHolder() != dir {
		return nil
	}
	return os.Remove(nodeLock)
}

// setupHost records the host's state, then makes the node's network: the
// bridge with the node's address, forwarding, and the guard that keeps the
// pod and Service ranges on this machine. It runs before any component, so
// the guard is there before the first pod starts.
func (e *Env) setupHost() error {
	if err := e.lockNode(); err != nil {
		return err
	}
	before, err := snapshotHost()
	if err != nil {
		return err
	}
	if err := writeHostState(e.path(fileHost), before); err != nil {
		return err
	}
	var steps [][]string
	if !linkExists(NodeBridge) {
		steps = append(steps, []string{"ip", "link", "add", NodeBridge, "type", "bridge"})
	}
	steps = append(steps,
		[]string{"ip", "addr", "replace", NodeIP + "/24", "dev", NodeBridge},
		[]string{"ip", "link", "set", NodeBridge, "up"},
	)
	steps = append(steps, guardRules()...)
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("node network: %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	for name, v := range map[string]string{"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"} {
		if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
			return fmt.Errorf("node network: sysctl %s=%s: %w", name, v, err)
		}
	}
	return nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// guardRules keeps the node's traffic on the machine: nothing addressed to
// the pod or Service ranges leaves by an interface other than the node's
// bridge (a Service IP that kube-proxy has not translated would otherwise
// follow the default route), and nothing from a pod is forwarded anywhere
// but back to the bridge. The filter table sees packets after kube-proxy's
// DNAT, so translated Service traffic passes: from a pod, and from the host,
// whose packet is rerouted to the bridge after the DNAT although OUTPUT's
// -o still names the interface of the route taken before it (the hook's
// output device is fixed when the packet enters it), hence the RETURN for
// what was translated to the node's pod subnet.
func guardRules() [][]string {
	ipt := func(args ...string) []string { return append([]string{"iptables", "-w"}, args...) }
	// A TCP connection is refused with a reset, which its sender sees at
	// once; anything else with an ICMP error.
	reject := func(chain string, match ...string) [][]string {
		return [][]string{
			ipt(slices.Concat([]string{"-A", chain}, match, []string{"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"})...),
			ipt(slices.Concat([]string{"-A", chain}, match, []string{"-j", "REJECT"})...),
		}
	}
	notLocal := []string{"!", "-o", NodeBridge, "-m", "addrtype", "!", "--dst-type", "LOCAL"}
	return slices.Concat(
		[][]string{
			ipt("-N", guardChain),
			ipt("-A", guardChain, "-d", podSubnet, "-m", "conntrack", "--ctstate", "DNAT", "-j", "RETURN"),
		},
		reject(guardChain, append([]string{"-d", serviceIPs}, notLocal...)...),
		reject(guardChain, append([]string{"-d", podRange}, notLocal...)...),
		[][]string{ipt("-N", podChain)},
		reject(podChain, "-i", NodeBridge, "!", "-o", NodeBridge),
		[][]string{
			ipt("-I", "OUTPUT", "1", "-j", guardChain),
			ipt("-I", "FORWARD", "1", "-j", guardChain),
			ipt("-I", "FORWARD", "1", "-j", podChain),
		},
	)
}

// GuardPackets is how many packets the guard has rejected so far; a test
// proves the guard holds by a connection that must be refused by it.
func GuardPackets() (int, error) {
	total := 0
	for _, chain := range []string{guardChain, podChain} {
		out, err := exec.Command("iptables", "-w", "-L", chain, "-n", "-v", "-x").Output()
		if err != nil {
			return 0, fmt.Errorf("iptables -L %s: %w", chain, err)
		}
		for l := range strings.SplitSeq(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) > 2 && f[2] == "REJECT" {
				n, err := strconv.Atoi(f[0])
				if err != nil {
					return 0, fmt.Errorf("iptables -L %s: %q", chain, l)
				}
				total += n
			}
		}
	}
	return total, nil
}

// startNode starts the scheduler, containerd (with the sandbox image), the
// kubelet and kube-proxy, and returns when the Node is Ready and kube-proxy
// has programmed the Services.
func (e *Env) startNode(ctx context.Context) error {
	if err := os.MkdirAll(e.nodePath("images"), 0o755); err != nil {
		return err
	}
	if err := e.ensureKubeDNSService(ctx); err != nil {
		return err
	}
	sched, err := e.startScheduler(ctx)
	if err != nil {
		return err
	}
	e.procs[Scheduler] = sched
	ctrd, err := e.startContainerd(ctx)
	if err != nil {
		return err
	}
	e.procs[Containerd] = ctrd
	if err := e.importSandboxImage(ctx); err != nil {
		return err
	}
	kubelet, err := e.startKubelet(ctx)
	if err != nil {
		return err
	}
	e.procs[KubeletName] = kubelet
	proxy, err := e.startKubeProxy(ctx)
	if err != nil {
		return err
	}
	e.procs[KubeProxy] = proxy
	return nil
}

// ensureKubeDNSService makes kube-system/kube-dns, the Service pods'
// resolv.conf names (the kubelet's clusterDNS), route to CoreDNS on the
// node's address: CoreDNS does not run as a pod here, so its EndpointSlice
// is written by hand.
func (e *Env) ensureKubeDNSService(ctx context.Context) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: dnsIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt(e.ports.DNS)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt(e.ports.DNS)},
			},
		},
	}
	if _, err := e.client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-dns Service: %w", err)
	}
	port := int32(e.ports.DNS)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-testenv", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns",
			discoveryv1.LabelManagedBy:   "testenv",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{NodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: &port},
			{Name: ptr.To("dns-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: &port},
		},
	}
	slices := e.client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem)
	if _, err := slices.Create(ctx, slice, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		old, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		slice.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
		return err
	} else if err != nil {
		return fmt.Errorf("kube-dns EndpointSlice: %w", err)
	}
	return nil
}

func (e *Env) startScheduler(ctx context.Context) (*proc.Process, error) {
	return retryOnPortClash(func() (*proc.Process, error) {
		port, err := freePort(false)
		if err != nil {
			return nil, err
		}
		args := []string{
			"--kubeconfig=" + e.path(fileSchedulerKubeconfig),
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + e.nodePath("scheduler-certs"),
		}
		return e.launch(ctx, Scheduler, args, func(ctx context.Context, _ *proc.Process) error {
			return e.getAnonymous(ctx, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", "ok")
		})
	})
}

// containerdConfig is containerd 2's configuration (version 3) for the
// node: its files under the Env's directory, the CRI plugin with runc and
// the node's CNI network, the sandbox image pinned (it is imported, never
// pulled), and restrict_oom_score_adj because root here may lack
// CAP_SYS_RESOURCE (without it every sandbox fails to start).
func (e *Env) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [%q]
  conf_dir = %q

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %q
  SystemdCgroup = false

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
`, e.nodePath("containerd/root"), e.nodePath("containerd/state"), e.containerdSocket(), e.containerdSocket()+".ttrpc",
		SandboxImage, cniBinDir, e.nodePath("cni"), runcBinary)
}

// cniConfig is the pods' network: a bridge of the node's own with host-local
// addresses from podSubnet, the node as gateway, no masquerading (nothing
// leaves the machine).
func (e *Env) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "testenv",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, NodeBridge, podSubnet, NodeIP, e.nodePath("cni-ipam"))
}

func (e *Env) startContainerd(ctx context.Context) (*proc.Process, error) {
	cfg := e.nodePath("containerd.toml")
	if err := errors.Join(
		os.MkdirAll(e.nodePath("cni"), 0o755),
		writeFile(cfg, []byte(e.containerdConfig()), 0o644),
		writeFile(e.nodePath("cni/10-testenv.conflist"), []byte(e.cniConfig()), 0o644),
	); err != nil {
		return nil, err
	}
	return e.launch(ctx, Containerd, []string{"--config", cfg}, func(ctx context.Context, _ *proc.Process) error {
		_, err := e.ctr(ctx, "version")
		return err
	})
}

// ctr runs containerd's own client against the node's containerd, in the
// namespace the CRI plugin uses.
func (e *Env) ctr(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{"--address", e.containerdSocket(), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(e.bin, "ctr"), argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage imports a docker-archive tarball into the node's containerd,
// where pods with imagePullPolicy Never find it.
func (e *Env) ImportImage(ctx context.Context, archive string) error {
	if !e.node {
		return errors.New("testenv: no node")
	}
	_, err := e.ctr(ctx, "images", "import", archive)
	return err
}

// ImportImages writes each image as a docker archive in dir and imports it
// into the node's containerd; it returns the archives' paths.
func (e *Env) ImportImages(ctx context.Context, dir string, imgs ...image.Image) ([]string, error) {
	var paths []string
	for _, img := range imgs {
		path := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
		if err := image.WriteArchiveFile(path, img); err != nil {
			return paths, err
		}
		if err := e.ImportImage(ctx, path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// importSandboxImage builds the sandbox program and imports it as
// SandboxImage.
func (e *Env) importSandboxImage(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	bin := e.nodePath("images/pause")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./internal/testenv/cmd/pause")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the sandbox image: %v: %s", err, out)
	}
	_, err = e.ImportImages(ctx, e.nodePath("images"), image.Image{
		Ref:    SandboxImage,
		Layers: []image.Layer{{Files: []image.File{{Path: "/pause", Mode: 0o755, Src: bin}}}},
		Config: image.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
	})
	return err
}

// kubeletConfig is the KubeletConfiguration for this machine: cgroup v1
// and cgroupfs, swap allowed, its files under the Env's directory, the
// API server's callers (kubectl logs, exec) let in unauthenticated on the
// node's bridge address only, image garbage collection off (imported
// images cannot be pulled again) and low eviction thresholds.
func (e *Env) kubeletConfig(healthz int) string {
	sync := e.syncFrequency
	if sync == 0 {
		sync = 10 * time.Second
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS: [%s]
clusterDomain: %s
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
syncFrequency: %s
podLogsDir: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
serializeImagePulls: false
enableControllerAttachDetach: false
kernelMemcgNotification: false
shutdownGracePeriod: 0s
`, NodeIP, kubeletPort, healthz, dnsIP, ClusterDomain, e.containerdSocket(), sync, e.nodePath("pod-logs"))
}

func (e *Env) startKubelet(ctx context.Context) (*proc.Process, error) {
	return retryOnPortClash(func() (*proc.Process, error) {
		healthz, err := freePort(false)
		if err != nil {
			return nil, err
		}
		cfg := e.nodePath("kubelet.yaml")
		if err := writeFile(cfg, []byte(e.kubeletConfig(healthz)), 0o644); err != nil {
			return nil, err
		}
		args := []string{
			"--config=" + cfg,
			"--kubeconfig=" + e.path(fileKubeletKubeconfig),
			"--root-dir=" + e.nodePath("kubelet"),
			"--cert-dir=" + e.nodePath("kubelet-certs"),
			"--hostname-override=" + NodeName,
			"--node-ip=" + NodeIP,
		}
		return e.launch(ctx, KubeletName, args, func(ctx context.Context, _ *proc.Process) error {
			if err := e.get(ctx, "http://127.0.0.1:"+strconv.Itoa(healthz)+"/healthz", "ok"); err != nil {
				return err
			}
			return e.nodeReady(ctx)
		})
	})
}

// nodeReady reports whether the Node is registered, Ready and without the
// not-ready taint, so pods can be scheduled to it.
func (e *Env) nodeReady(ctx context.Context) error {
	n, err := e.client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if c := nodeCondition(n, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		msg := "no Ready condition"
		if c != nil {
			msg = c.Reason + ": " + c.Message
		}
		return fmt.Errorf("node %s not Ready: %s", NodeName, msg)
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return fmt.Errorf("node %s still has the %s taint", NodeName, t.Key)
		}
	}
	return nil
}

// kubeProxyConfig runs kube-proxy in iptables mode for the node, leaving
// the host's conntrack settings alone and opening NodePorts on the node's
// bridge address only.
func (e *Env) kubeProxyConfig(healthz, metrics int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: ["%s/32"]
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`, e.path(fileProxyKubeconfig), NodeName, podRange, healthz, metrics, NodeIP)
}

func (e *Env) startKubeProxy(ctx context.Context) (*proc.Process, error) {
	return retryOnPortClash(func() (*proc.Process, error) {
		healthz, err1 := freePort(false)
		metrics, err2 := freePort(false)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		cfg := e.nodePath("kube-proxy.yaml")
		if err := writeFile(cfg, []byte(e.kubeProxyConfig(healthz, metrics)), 0o644); err != nil {
			return nil, err
		}
		return e.launch(ctx, KubeProxy, []string{"--config=" + cfg}, func(ctx context.Context, _ *proc.Process) error {
			if err := e.get(ctx, "http://127.0.0.1:"+strconv.Itoa(healthz)+"/healthz", ""); err != nil {
				return err
			}
			// Programmed: the kube-dns Service answers through its ClusterIP.
			return dnsAnswersAt(ctx, net.JoinHostPort(dnsIP, "53"))
		})
	})
}

// stopNode stops the kubelet first (so it restarts nothing), kills every
// container, then stops kube-proxy, containerd (and its shims) and the
// scheduler. The caller holds e.mu.
func (e *Env) stopNode() error {
	var errs []error
	stop := func(name string) {
		if p := e.procs[name]; p != nil {
			errs = append(errs, p.Stop(stopGrace))
			delete(e.procs, name)
		}
	}
	stop(KubeletName)
	// The pods' cgroups are the node's: an Env that was refused the node
	// (another runs) must not kill that one's pods.
	if nodeLockHolder() == e.Dir {
		for _, cg := range topCgroups() {
			if filepath.Base(cg) == "kubepods" || strings.HasPrefix(filepath.Base(cg), "kubepods.") {
				killCgroup(cg)
			}
		}
	}
	stop(KubeProxy)
	stop(Containerd)
	killShims(e.containerdSocket())
	stop(Scheduler)
	return errors.Join(errs...)
}

// killShims kills the runc shims of the node's containerd, which outlive
// containerd by design; each names the containerd socket on its command
// line.
func killShims(socket string) {
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), "containerd-shim") && strings.Contains(string(cmdline), socket) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
}

// restoreNodeHost puts the host back as setupHost found it and checks that
// it is: every difference left is an error.
func (e *Env) restoreNodeHost() error {
	if h := nodeLockHolder(); h != "" && h != e.Dir {
		return nil // the node is another Env's: this one never touched the host
	}
	before, err := readHostState(e.path(fileHost))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Twice: a cgroup or mount can be busy for a moment after its last
	// process died. The host as it is decides, not restoreHost's errors.
	var failed error
	for attempt := range 2 {
		if attempt > 0 {
			sleepBrief()
		}
		rerr := restoreHost(before)
		after, serr := snapshotHost()
		if d := before.diff(after); serr == nil && len(d) == 0 {
			return errors.Join(os.Remove(e.path(fileHost)), unlockNode(e.Dir))
		} else if len(d) > 0 {
			serr = errors.Join(serr, fmt.Errorf("the host is not as the node found it:\n  %s", strings.Join(d, "\n  ")))
		}
		failed = errors.Join(rerr, serr)
	}
	return failed
}

func sleepBrief() { time.Sleep(100 * time.Millisecond) }
