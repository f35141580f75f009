package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ClusterDomain is the DNS domain CoreDNS serves for the cluster.
const ClusterDomain = "cluster.local"

// Component names: process names in the pids file and log file names.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	CoreDNS           = "coredns"
)

// components lists the component names in start order: the control plane,
// then the node's when it runs.
func (e *Env) components() []string {
	c := []string{Etcd, APIServer, ControllerManager, CoreDNS}
	if e.node {
		c = append(c, nodeComponents()...)
	}
	return c
}

// startTimeout bounds Start as a whole; a cold start on a loaded 2-core CI
// machine takes a few seconds, so this only catches a component that hangs.
const startTimeout = 2 * time.Minute

// Env is a running local control plane. Its methods are safe for concurrent
// use, but the fault injection methods (StopAPIServer, StopDNS, ...) affect
// every test sharing the Env: tests that use them must not run in parallel
// with tests that need the component.
type Env struct {
	// Dir holds the Env's configuration, data, logs (<component>.log) and the
	// files for users: kubeconfig, env, audit.log, pids.
	Dir string
	// Kubeconfig is the admin kubeconfig (Dir/kubeconfig).
	Kubeconfig string
	// DNSAddr is CoreDNS' address, 127.0.0.1:PORT.
	DNSAddr string
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain string
	// AuditLog is the API server's audit log (JSON lines, Metadata level).
	AuditLog string
	// Etcd is the etcd it runs: the build of EtcdVersion, or another that
	// TESTENV_ETCD names (see EtcdEnv).
	Etcd EtcdInfo

	bin    string
	detach bool
	// node: a real node runs too (Options.Node); host is the address the
	// API server listens on and serves (NodeIP with a node, else 127.0.0.1).
	node          bool
	host          string
	syncFrequency time.Duration // the kubelet's, now
	syncDefault   time.Duration // Options.SyncFrequency
	profiling     bool
	ports         ports
	tokens        map[string]string
	admin         *rest.Config
	client        kubernetes.Interface
	probe         *http.Client

	mu      sync.Mutex
	procs   map[string]*proc.Process
	stopped bool
}

// CacheDir is where hack/install-tools.sh caches what the tests run
// against: $KOLLA_AGENT_CACHE, by default $HOME/.cache/kolla-agent.
func CacheDir() string {
	if c := os.Getenv("KOLLA_AGENT_CACHE"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "kolla-agent")
}

// BinDir is where the component binaries are cached:
// $KOLLA_AGENT_CACHE/bin, by default $HOME/.cache/kolla-agent/bin.
// hack/install-tools.sh puts them there.
func BinDir() string { return filepath.Join(CacheDir(), "bin") }

// Start starts etcd (EtcdEnv says which), kube-apiserver,
// kube-controller-manager and CoreDNS on free loopback ports with their
// files in dir, and returns once the API server is ready, the controller
// manager has created the default ServiceAccount and CoreDNS answers from
// the API. The components die with
// the calling process; call Stop when done. Files of an earlier Env in dir
// are replaced (that Env must be stopped).
func Start(dir string) (*Env, error) { return StartWith(dir, Options{}) }

// StartDetached is Start for processes that must outlive the caller
// (hack/testenv up): each runs in its own session, without a parent-death
// signal. Stop them with Open(dir) and Stop.
func StartDetached(dir string) (*Env, error) { return StartWith(dir, Options{Detach: true}) }

// StartWith is Start with options: a real node (Options.Node), detached
// processes. With a node it returns once the Node is Ready and kube-proxy
// routes the cluster's Services; it fails, saying why, where NodeMissing
// does.
func StartWith(dir string, o Options) (*Env, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	source, err := etcdSource()
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	if o.Node {
		if why := NodeMissing(); why != "" {
			return nil, fmt.Errorf("testenv: no node: %s", why)
		}
	}
	e := newEnv(abs, BinDir(), o.Detach)
	e.Etcd.Source = source
	e.node, e.syncFrequency, e.syncDefault = o.Node, o.SyncFrequency, o.SyncFrequency
	e.profiling = o.Profiling
	if o.Node {
		e.host = NodeIP
	}
	for _, name := range e.components() {
		if _, err := exec.LookPath(e.binary(name)); err != nil {
			return nil, fmt.Errorf("testenv: %s is not installed (run hack/install-tools.sh): %w", e.binary(name), err)
		}
	}
	if err := e.prepare(); err != nil {
		return nil, fmt.Errorf("testenv: prepare %s: %w", abs, err)
	}
	if e.node {
		if err := e.setupHost(); err != nil {
			return nil, errors.Join(fmt.Errorf("testenv: %w", err), e.Stop())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := e.startAll(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("testenv: %w", err), e.Stop())
	}
	return e, nil
}

func newEnv(dir, bin string, detach bool) *Env {
	return &Env{
		Dir:           dir,
		Kubeconfig:    filepath.Join(dir, fileKubeconfig),
		host:          "127.0.0.1",
		ClusterDomain: ClusterDomain,
		AuditLog:      filepath.Join(dir, fileAuditLog),
		bin:           bin,
		detach:        detach,
		procs:         map[string]*proc.Process{},
		probe: &http.Client{
			Timeout: 2 * time.Second,
			Transport: &http.Transport{
				Proxy:             nil,
				DisableKeepAlives: true, // no idle connections (and their goroutines) left behind
				// Health endpoints only; the API itself is reached through
				// the verified admin config.
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe
			},
		},
	}
}

// prepare writes the files the components read. State from an earlier run
// in the same directory is discarded, except the ServiceAccount key.
func (e *Env) prepare() error {
	if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{dirEtcdData, dirCerts, dirAgents, fileAuditLog, filePids, fileEnv, fileKubeconfig} {
		if err := os.RemoveAll(e.path(f)); err != nil {
			return err
		}
	}
	e.tokens = map[string]string{}
	users := []string{userAdmin, userKCM, userCoreDNS}
	if e.node {
		users = append(users, userKubelet, userProxy, userScheduler)
	}
	for _, u := range users {
		t, err := newToken()
		if err != nil {
			return err
		}
		e.tokens[u] = t
	}
	return errors.Join(
		writeTokens(e.path(fileTokens), e.tokens),
		writeFile(e.path(fileAuditPolicy), []byte(auditPolicy), 0o644),
		ensureSAKey(e.path(fileSAKey), e.path(fileSAPub)),
	)
}

// startAll starts the components in dependency order. Nothing else can see
// e yet, so e.procs is written without the lock.
func (e *Env) startAll(ctx context.Context) error {
	etcd, err := retryOnPortClash(func() (*proc.Process, error) {
		var err1, err2 error
		e.ports.EtcdClient, err1 = freePort(false)
		e.ports.EtcdPeer, err2 = freePort(false)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		return e.startEtcd(ctx)
	})
	if err != nil {
		return err
	}
	e.procs[Etcd] = etcd
	if err := e.readEtcdVersion(ctx); err != nil {
		return err
	}
	apiserver, err := retryOnPortClash(func() (*proc.Process, error) {
		var err error
		if e.ports.APIServer, err = freePort(false); err != nil {
			return nil, err
		}
		return e.startAPIServer(ctx)
	})
	if err != nil {
		return err
	}
	e.procs[APIServer] = apiserver
	if err := e.writeKubeconfigs(); err != nil {
		return err
	}
	// Both only need the API server; starting them together saves time.
	var wg sync.WaitGroup
	var kcm, coredns *proc.Process
	var kcmErr, dnsErr error
	wg.Go(func() { kcm, kcmErr = e.startControllerManager(ctx) })
	wg.Go(func() {
		coredns, dnsErr = retryOnPortClash(func() (*proc.Process, error) {
			var err error
			if e.ports.DNS, err = freePort(true); err != nil {
				return nil, err
			}
			return e.startCoreDNS(ctx)
		})
	})
	wg.Wait()
	if kcm != nil {
		e.procs[ControllerManager] = kcm
	}
	if coredns != nil {
		e.procs[CoreDNS] = coredns
	}
	if err := errors.Join(kcmErr, dnsErr); err != nil {
		return err
	}
	if e.node {
		if err := e.startNode(ctx); err != nil {
			return err
		}
	}
	return e.writeUserFiles()
}

// writeKubeconfigs writes the admin kubeconfig and one per component, now
// that the API server has written its serving certificate.
func (e *Env) writeKubeconfigs() error {
	ca, err := servingCA(e.path(dirCerts), e.host)
	if err != nil {
		return err
	}
	server := e.serverURL()
	files := map[string]string{fileKubeconfig: userAdmin, fileKCMKubeconfig: userKCM, fileDNSKubeconfig: userCoreDNS}
	if e.node {
		files[fileKubeletKubeconfig] = userKubelet
		files[fileProxyKubeconfig] = userProxy
		files[fileSchedulerKubeconfig] = userScheduler
	}
	for file, user := range files {
		if err := writeKubeconfig(e.path(file), server, ca, user, e.tokens[user], ""); err != nil {
			return err
		}
	}
	return e.setAdmin(ca)
}

// setAdmin builds the admin client; ca as for writeKubeconfig.
func (e *Env) setAdmin(ca []byte) error {
	cfg := &rest.Config{
		Host:            e.serverURL(),
		BearerToken:     e.tokens[userAdmin],
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, Insecure: ca == nil},
		QPS:             -1, // tests must not queue behind a client-side rate limiter
		UserAgent:       "kolla-agent-testenv",
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	e.admin, e.client = cfg, client
	return nil
}

// writeUserFiles writes DIR/env, DIR/pids and the state Open reads.
func (e *Env) writeUserFiles() error {
	e.DNSAddr = e.dnsAddr()
	env := fmt.Sprintf("export KUBECONFIG=%s\nexport KOLLA_AGENT_DNS_SERVER=%s\nexport CLUSTER_DOMAIN=%s\n",
		shellQuote(e.Kubeconfig), e.DNSAddr, e.ClusterDomain)
	if e.node {
		env += "export TESTENV_NODE=" + NodeName + "\n"
	}
	return errors.Join(
		writeFile(e.path(fileEnv), []byte(env), 0o644),
		writeState(e.path(fileState), state{Ports: e.ports, Host: e.host, Node: e.node, Bin: e.bin, Detached: e.detach, Token: e.tokens[userAdmin], Etcd: e.Etcd}),
		e.writePids(),
	)
}

// writePids records the running components. The caller holds e.mu, or no
// other goroutine can see e yet.
func (e *Env) writePids() error {
	var b strings.Builder
	for _, name := range e.components() {
		if p := e.procs[name]; p != nil {
			fmt.Fprintf(&b, "%s %d\n", name, p.Pid)
		}
	}
	return writeFile(e.path(filePids), []byte(b.String()), 0o644)
}

// Open returns the Env that hack/testenv (or Start) left running in dir,
// adopting its recorded processes. Check it with Healthy; Stop stops it.
func Open(dir string) (*Env, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := readState(filepath.Join(abs, fileState))
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	pids, err := readPids(filepath.Join(abs, filePids))
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	e := newEnv(abs, st.Bin, st.Detached)
	e.ports = st.Ports
	e.Etcd = st.Etcd
	e.node = st.Node
	if st.Host != "" {
		e.host = st.Host
	}
	e.DNSAddr = e.dnsAddr()
	e.tokens = map[string]string{userAdmin: st.Token}
	for _, pe := range pids {
		if p := adopt(pe.name, pe.pid, abs, e.path(pe.name+".log")); p != nil {
			e.procs[pe.name] = p
		}
	}
	ca, err := servingCA(e.path(dirCerts), e.host)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	if err := e.setAdmin(ca); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return e, nil
}

// Healthy reports whether every component is running, the API server is
// ready and CoreDNS answers.
func (e *Env) Healthy(ctx context.Context) error {
	e.mu.Lock()
	for _, name := range e.components() {
		if p := e.procs[name]; p == nil || p.Exited() {
			e.mu.Unlock()
			return fmt.Errorf("testenv: %s is not running", name)
		}
	}
	e.mu.Unlock()
	return errors.Join(e.apiserverReady(ctx), e.dnsAnswers(ctx))
}

// Stop stops every component this Env started (or adopted), by PID: SIGTERM,
// then SIGKILL after a few seconds. It is idempotent.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	// The node first, then clients of the API server, etcd last: an API
	// server whose etcd is gone hangs in its graceful shutdown until SIGKILL.
	var errs []error
	if e.node {
		errs = append(errs, e.stopNode())
	}
	for _, stage := range [][]string{{CoreDNS, ControllerManager}, {APIServer}, {Etcd}} {
		stageErrs := make([]error, len(stage))
		var wg sync.WaitGroup
		for i, name := range stage {
			if p := e.procs[name]; p != nil {
				wg.Go(func() { stageErrs[i] = p.Stop(stopGrace) })
			}
		}
		wg.Wait()
		errs = append(errs, stageErrs...)
	}
	if e.node {
		errs = append(errs, e.restoreNodeHost())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.procs = map[string]*proc.Process{}
	if err := os.Remove(e.path(filePids)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// StopAPIServer stops kube-apiserver gracefully (SIGTERM: it sends GOAWAY on
// open connections and exits within about 2 s), leaving etcd, the controller
// manager and CoreDNS running.
func (e *Env) StopAPIServer() error { return e.stopComponent(APIServer, stopGrace) }

// KillAPIServer kills kube-apiserver with SIGKILL: connections drop without
// a goodbye, as when the process crashes or its node dies.
func (e *Env) KillAPIServer() error { return e.stopComponent(APIServer, 0) }

// StartAPIServer starts kube-apiserver again on the same port, with the same
// etcd, certificates and keys, and waits until it is ready. It does nothing
// if the API server is running, so a test can defer it to undo its fault
// whatever happens.
//
// The controller manager is restarted with it: its informers back off
// after an outage (client-go's reflector: 800 ms doubling to 30 s, with
// jitter up to as much again, and the 403s of an authorizer still warming
// up count as failures too), so the Job and EndpointSlice controllers could
// take over a minute to act again, and a test would measure their delay, not
// the agent's. A fresh one lists at once.
func (e *Env) StartAPIServer() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	restarted, err := e.restartComponent(ctx, APIServer, e.startAPIServer)
	if err != nil || !restarted {
		return err
	}
	if err := e.stopComponent(ControllerManager, stopGrace); err != nil {
		return err
	}
	_, err = e.restartComponent(ctx, ControllerManager, e.startControllerManager)
	return err
}

// RestartKubelet restarts the node's kubelet with syncFrequency sync (0:
// Options.SyncFrequency's): the pods keep running in containerd meanwhile,
// as on a node whose kubelet restarts. A benchmark measures at the
// kubelet's own default (1m) this way in a run whose node uses 10 s.
func (e *Env) RestartKubelet(sync time.Duration) error {
	if !e.node {
		return fmt.Errorf("testenv: no node")
	}
	if err := e.stopComponent(KubeletName, stopGrace); err != nil {
		return err
	}
	e.mu.Lock()
	if sync == 0 {
		sync = e.syncDefault
	}
	e.syncFrequency = sync
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	_, err := e.restartComponent(ctx, KubeletName, e.startKubelet)
	return err
}

// StopDNS stops CoreDNS; queries to DNSAddr go unanswered until StartDNS.
func (e *Env) StopDNS() error { return e.stopComponent(CoreDNS, stopGrace) }

// StartDNS starts CoreDNS again on the same port and waits until it answers.
// Like StartAPIServer, it does nothing if CoreDNS is running.
func (e *Env) StartDNS() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	_, err := e.restartComponent(ctx, CoreDNS, e.startCoreDNS)
	return err
}

// stopComponent stops one component: SIGTERM and up to grace to exit, then
// SIGKILL (at once for a zero grace).
func (e *Env) stopComponent(name string, grace time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return fmt.Errorf("testenv: stopped")
	}
	p := e.procs[name]
	if p == nil {
		return nil
	}
	if err := p.Stop(grace); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	delete(e.procs, name)
	return e.writePids()
}

// restartComponent starts a component that is not running; it reports
// whether it did.
func (e *Env) restartComponent(ctx context.Context, name string, start func(context.Context) (*proc.Process, error)) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return false, fmt.Errorf("testenv: stopped")
	}
	if p := e.procs[name]; p != nil && !p.Exited() {
		return false, nil
	}
	delete(e.procs, name)
	p, err := start(ctx)
	if err != nil {
		return false, fmt.Errorf("testenv: restart %s: %w", name, err)
	}
	e.procs[name] = p
	return true, e.writePids()
}

// Admin returns a copy of the admin client configuration.
func (e *Env) Admin() *rest.Config { return rest.CopyConfig(e.admin) }

// Client returns the admin clientset.
func (e *Env) Client() kubernetes.Interface { return e.client }

func (e *Env) path(name string) string { return filepath.Join(e.Dir, name) }

func (e *Env) serverURL() string { return "https://" + e.host + ":" + strconv.Itoa(e.ports.APIServer) }

// Node reports whether a real node runs (Options.Node).
func (e *Env) Node() bool { return e.node }

func (e *Env) dnsAddr() string { return "127.0.0.1:" + strconv.Itoa(e.ports.DNS) }
