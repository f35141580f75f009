package testenv

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// Files inside an Env's directory.
const (
	fileKubeconfig    = "kubeconfig"
	fileEnv           = "env"
	filePids          = "pids"
	fileState         = "testenv.json"
	fileAuditLog      = "audit.log"
	fileAuditPolicy   = "audit-policy.yaml"
	fileTokens        = "tokens.csv"
	fileSAKey         = "sa.key"
	fileSAPub         = "sa.pub"
	fileCorefile      = "Corefile"
	fileKCMKubeconfig = "kube-controller-manager.kubeconfig"
	fileDNSKubeconfig = "coredns.kubeconfig"
	// The node's components', when it runs.
	fileSchedulerKubeconfig = "kube-scheduler.kubeconfig"
	fileKubeletKubeconfig   = "kubelet.kubeconfig"
	fileProxyKubeconfig     = "kube-proxy.kubeconfig"
	dirEtcdData             = "etcd-data"
	dirCerts                = "apiserver-certs"
	dirAgents               = "agents"
)

// auditPolicy logs every request at Metadata level. RequestReceived is
// omitted: it would log each request twice, and ResponseStarted (watches) and
// ResponseComplete already carry the request's received time.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// Identities in the static token file. Each component gets its own user so
// the audit log tells them apart. The control plane's are cluster admins;
// the node's have what a real cluster gives them: the kubelet is
// system:node:NAME in system:nodes (the Node authorizer and NodeRestriction
// judge it), kube-proxy and the scheduler the users their default
// ClusterRoleBindings name.
const (
	userAdmin     = "admin"
	userKCM       = "system:kube-controller-manager"
	userCoreDNS   = "coredns"
	userKubelet   = "system:node:" + NodeName
	userProxy     = "system:kube-proxy"
	userScheduler = "system:kube-scheduler"
)

// tokenGroups is each user's groups in the static token file.
func tokenGroups() map[string]string {
	return map[string]string{
		userAdmin: "system:masters", userKCM: "system:masters", userCoreDNS: "system:masters",
		userKubelet: "system:nodes", userProxy: "", userScheduler: "",
	}
}

// state is what Open needs to find a running Env again.
type state struct {
	Ports    ports    `json:"ports"`
	Host     string   `json:"host"`
	Node     bool     `json:"node"`
	Bin      string   `json:"bin"`
	Detached bool     `json:"detached"`
	Token    string   `json:"token"`
	Etcd     EtcdInfo `json:"etcd"`
}

type ports struct {
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	APIServer  int `json:"apiserver"`
	DNS        int `json:"dns"`
}

// newToken returns a random bearer token.
func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeTokens writes the static token file: a token per user with the
// user's groups (tokenGroups).
func writeTokens(path string, tokens map[string]string) error {
	var b strings.Builder
	groups := tokenGroups()
	users := make([]string, 0, len(tokens))
	for user := range tokens {
		users = append(users, user)
	}
	sort.Strings(users)
	for _, user := range users {
		fmt.Fprintf(&b, "%s,%s,%s", tokens[user], user, user)
		if g := groups[user]; g != "" {
			fmt.Fprintf(&b, ",%q", g)
		}
		b.WriteString("\n")
	}
	return writeFile(path, []byte(b.String()), 0o600)
}

// ensureSAKey writes the key pair that signs ServiceAccount tokens, unless it
// exists: a restarted API server must keep accepting the tokens it issued.
func ensureSAKey(keyPath, pubPath string) error {
	if _, err := os.Stat(keyPath); err == nil {
		if _, err := os.Stat(pubPath); err == nil {
			return nil
		}
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return writeFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// servingCA returns the API server's self-signed serving certificate bundle
// (leaf + its CA) when it verifies for host (the address it listens on), or
// nil when clients have to skip verification.
func servingCA(certDir, host string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certDir, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s: no certificate in apiserver.crt", certDir)
	}
	roots := x509.NewCertPool()
	for _, c := range certs {
		roots.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
		return nil, nil
	}
	return data, nil
}

// writeKubeconfig writes a single-context kubeconfig authenticating with a
// bearer token. A nil ca means insecure-skip-tls-verify. (The versioned
// types, not clientcmd: that package would pull in pflag for nothing.)
func writeKubeconfig(path, server string, ca []byte, user, token, namespace string) error {
	cfg := clientcmdv1.Config{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []clientcmdv1.NamedCluster{{Name: "testenv", Cluster: clientcmdv1.Cluster{
			Server:                   server,
			CertificateAuthorityData: ca,
			InsecureSkipTLSVerify:    ca == nil,
		}}},
		AuthInfos: []clientcmdv1.NamedAuthInfo{{Name: user, AuthInfo: clientcmdv1.AuthInfo{Token: token}}},
		Contexts: []clientcmdv1.NamedContext{{Name: "testenv", Context: clientcmdv1.Context{
			Cluster: "testenv", AuthInfo: user, Namespace: namespace,
		}}},
		CurrentContext: "testenv",
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

// writeFile replaces path atomically, so a reader (the hack/testenv user, a
// restarted component) never sees a half-written file.
func writeFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), perm)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func writeState(path string, s state) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'), 0o600)
}

func readState(path string) (state, error) {
	var s state
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// pidEntry is one line of the pids file: "NAME PID".
type pidEntry struct {
	name string
	pid  int
}

func readPids(path string) ([]pidEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []pidEntry
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pid, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 2 || err != nil || pid <= 1 {
			return nil, fmt.Errorf("%s:%d: want \"NAME PID\", got %q", path, i+1, line)
		}
		out = append(out, pidEntry{name: f[0], pid: pid})
	}
	return out, nil
}
