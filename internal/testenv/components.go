package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
	"github.com/miekg/dns"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// serviceCIDR is the Service IP range; the API server gives the first
// address to the "kubernetes" Service, which CoreDNS' readiness check resolves.
const serviceCIDR = "10.96.0.0/16"

// controllers is what kube-controller-manager runs: everything except what
// needs a cloud, node IPAM, real node health or volumes.
const controllers = "*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route,-persistentvolume-binder,-attachdetach"

// nodeControllers is what it runs with a real node: node lifecycle too,
// which lifts a new Node's not-ready taint once the kubelet reports Ready,
// and the PersistentVolume binder, which binds a StatefulSet's claims to
// the volumes a test makes (hostPath: nothing to attach).
const nodeControllers = "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route,-attachdetach"

// launch starts a component and waits until ready reports nil; a ready error
// wrapping errPortClash ends the wait at once. On failure the process is
// stopped, so the caller only ever records ready processes.
func (e *Env) launch(ctx context.Context, name string, args []string, ready func(context.Context, *proc.Process) error) (*proc.Process, error) {
	p, err := startProcess(name, e.binary(name), args, e.Dir, e.path(name+".log"), e.detach)
	if err != nil {
		return nil, err
	}
	var last error
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, exitError(p)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		last = ready(cctx, p)
		if errors.Is(last, errPortClash) {
			return false, last
		}
		return last == nil, nil
	})
	if err != nil {
		if last != nil && !errors.Is(last, errPortClash) && !p.Exited() {
			err = fmt.Errorf("%s (pid %d) not ready: %w: %v; last lines of %s:\n%s", name, p.Pid, err, last, p.Log, proc.LastLines(p.Output(), 15))
		}
		return nil, errors.Join(err, p.Stop(stopGrace))
	}
	return p, nil
}

// retryOnPortClash runs start up to three times while it fails because a port
// chosen as free was taken before the component bound it.
func retryOnPortClash(start func() (*proc.Process, error)) (*proc.Process, error) {
	var err error
	for range 3 {
		var p *proc.Process
		if p, err = start(); !errors.Is(err, errPortClash) {
			return p, err
		}
	}
	return nil, err
}

// binary is the path of a component's executable: etcd's depends on
// TESTENV_ETCD, the others are named after the component.
func (e *Env) binary(name string) string {
	if name == Etcd {
		return filepath.Join(e.bin, etcdBinary(e.Etcd.Source))
	}
	return filepath.Join(e.bin, name)
}

// freePort returns a loopback port that is free now (for UDP too, when
// withUDP is set). The component binds it a moment later; retryOnPortClash
// and ownsDNSPort deal with losing that race.
func freePort(withUDP bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if withUDP {
			u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				l.Close()
				continue
			}
			u.Close()
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port with UDP")
}

func (e *Env) startEtcd(ctx context.Context) (*proc.Process, error) {
	client := "http://127.0.0.1:" + strconv.Itoa(e.ports.EtcdClient)
	peer := "http://127.0.0.1:" + strconv.Itoa(e.ports.EtcdPeer)
	return e.launch(ctx, Etcd, e.etcdArgs(client, peer), func(ctx context.Context, _ *proc.Process) error {
		return e.get(ctx, client+"/health", `"health":"true"`)
	})
}

func (e *Env) startAPIServer(ctx context.Context) (*proc.Process, error) {
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(e.ports.EtcdClient),
		"--bind-address=" + e.host,
		"--advertise-address=" + e.host,
		"--secure-port=" + strconv.Itoa(e.ports.APIServer),
		// A self-signed serving certificate is generated here on first
		// start and reused on restart, so clients keep trusting it.
		"--cert-dir=" + e.path(dirCerts),
		"--token-auth-file=" + e.path(fileTokens),
		"--authorization-mode=" + e.authorizationMode(),
		"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
		"--service-account-key-file=" + e.path(fileSAPub),
		"--service-account-signing-key-file=" + e.path(fileSAKey),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--audit-policy-file=" + e.path(fileAuditPolicy),
		"--audit-log-path=" + e.AuditLog,
		"--audit-log-format=json",
		"--audit-log-mode=blocking", // each event is on disk before the response
		// One file for the env's life: 0 would still mean lumberjack's
		// 100 MB rotation, which a 500-agent benchmark passes, and
		// Requests reads only this file.
		"--audit-log-maxsize=100000",
		// On SIGTERM, stop after 2 s instead of waiting up to a minute for
		// open watches (those of the controller manager and CoreDNS) to end.
		"--shutdown-send-retry-after=true",
		"--allow-privileged=true",
		"--profiling=" + strconv.FormatBool(e.profiling),
	}
	if e.node {
		// What a real cluster runs: pods get their ServiceAccount's
		// projected token, and the kubelet may touch only its own Node and
		// pods. The node's address is a valid endpoint, so the
		// "kubernetes" Service gets one for kube-proxy to route to.
		args = append(args, "--enable-admission-plugins=NodeRestriction",
			// kubectl logs and exec reach the kubelet at the node's
			// address, never by looking its name up in the host's DNS.
			"--kubelet-preferred-address-types=InternalIP")
	} else {
		args = append(args,
			// Pods would otherwise be rejected until the controller manager
			// has created the namespace's default ServiceAccount: a race in
			// every test.
			"--disable-admission-plugins=ServiceAccount",
			// 127.0.0.1 is not a valid endpoint address: the default
			// reconciler fails every 10 s writing it into the "kubernetes"
			// Service's Endpoints. Nothing here needs those endpoints.
			"--endpoint-reconciler-type=none",
		)
	}
	return e.launch(ctx, APIServer, args, func(ctx context.Context, _ *proc.Process) error { return e.apiserverReady(ctx) })
}

// authorizationMode adds the Node authorizer when a kubelet runs.
func (e *Env) authorizationMode() string {
	if e.node {
		return "Node,RBAC"
	}
	return "RBAC"
}

func (e *Env) apiserverReady(ctx context.Context) error {
	return e.get(ctx, e.serverURL()+"/readyz", "ok")
}

func (e *Env) startControllerManager(ctx context.Context) (*proc.Process, error) {
	args := []string{
		"--kubeconfig=" + e.path(fileKCMKubeconfig),
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + e.controllers(),
		"--service-account-private-key-file=" + e.path(fileSAKey),
		"--root-ca-file=" + filepath.Join(e.path(dirCerts), "apiserver.crt"),
		// The default 20 QPS makes the Job and EndpointSlice controllers
		// lag behind tests that create objects quickly.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	}
	return e.launch(ctx, ControllerManager, args, func(ctx context.Context, _ *proc.Process) error { return e.serviceAccountsWork(ctx) })
}

func (e *Env) controllers() string {
	if e.node {
		return nodeControllers
	}
	return controllers
}

// serviceAccountsWork checks the ServiceAccount machinery end to end: the
// controller manager has created the default ServiceAccount, and the API
// server signs tokens for it.
func (e *Env) serviceAccountsWork(ctx context.Context) error {
	sa := e.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault)
	if _, err := sa.Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return err
	}
	ttl := int64(600)
	_, err := sa.CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	return err
}

func (e *Env) startCoreDNS(ctx context.Context) (*proc.Process, error) {
	// No cache plugin: tests see the API's current state, not a cached answer.
	corefile := fmt.Sprintf(`.:%d {
    bind %s
    errors
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig "%s"
        ttl 5
    }
}
`, e.ports.DNS, e.dnsBind(), ClusterDomain, e.path(fileDNSKubeconfig))
	if err := writeFile(e.path(fileCorefile), []byte(corefile), 0o644); err != nil {
		return nil, err
	}
	// CoreDNS sets SO_REUSEPORT, so a second instance on the same port starts
	// fine and silently gets half the queries: the port must be ours alone,
	// before and after CoreDNS answers (the other may bind later).
	return e.launch(ctx, CoreDNS, []string{"-conf", e.path(fileCorefile)}, func(ctx context.Context, p *proc.Process) error {
		if err := ownsPort(p.Pid, e.ports.DNS); err != nil {
			return err
		}
		if err := e.dnsAnswers(ctx); err != nil {
			return err
		}
		return ownsPort(p.Pid, e.ports.DNS)
	})
}

// dnsBind is where CoreDNS listens: loopback, and the node's address for
// pods when a node runs (the kube-dns Service routes there).
func (e *Env) dnsBind() string {
	if e.node {
		return "127.0.0.1 " + NodeIP
	}
	return "127.0.0.1"
}

// dnsAnswers asks CoreDNS for the kubernetes Service, which proves it serves
// on its port and has synced with the API server.
func (e *Env) dnsAnswers(ctx context.Context) error { return dnsAnswersAt(ctx, e.dnsAddr()) }

// dnsAnswersAt asks the DNS server at addr for the kubernetes Service.
func dnsAnswersAt(ctx context.Context, addr string) error {
	m := new(dns.Msg)
	m.SetQuestion("kubernetes.default.svc."+ClusterDomain+".", dns.TypeA)
	c := &dns.Client{Timeout: time.Second}
	r, _, err := c.ExchangeContext(ctx, m, addr)
	if err != nil {
		return err
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return fmt.Errorf("coredns: %s for %s", dns.RcodeToString[r.Rcode], m.Question[0].Name)
	}
	return nil
}

// get is a health probe: GET url and expect 200 with want in the body. An
// https URL gets the admin token (the API server's /readyz needs one).
func (e *Env) get(ctx context.Context, url, want string) error { return e.getAs(ctx, url, want, true) }

// getAnonymous is get without a token, for a component whose health
// endpoints are open but which cannot check the API server's tokens.
func (e *Env) getAnonymous(ctx context.Context, url, want string) error {
	return e.getAs(ctx, url, want, false)
}

func (e *Env) getAs(ctx context.Context, url, want string, withToken bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if t := e.tokens[userAdmin]; withToken && t != "" && strings.HasPrefix(url, "https:") {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := e.probe.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return nil
}

// ownsPort checks that every UDP socket and listening TCP socket on port
// belongs to pid. No socket at all is fine: pid has not bound yet. A
// foreign socket is a port clash.
func ownsPort(pid, port int) error {
	_, foreign, err := proc.PortSockets(pid, port, true)
	if err != nil || len(foreign) == 0 {
		return err
	}
	return fmt.Errorf("%w: coredns: another process also has port %d (socket inode %s)", errPortClash, port, foreign[0])
}
