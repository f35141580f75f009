package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/util/version"
)

// EtcdVersion is the etcd an Env runs unless TESTENV_ETCD says otherwise:
// the minor kubeadm pairs with Kubernetes 1.36 (its DefaultEtcdVersion is
// 3.6.8), at the newest 3.6 patch. hack/install-tools.sh builds it from the
// go.etcd.io/etcd/server/v3 module as $KOLLA_AGENT_CACHE/bin/etcd-<version>;
// its ETCD_VERSION names the same (TestEtcdVersionMatchesInstallTools).
const EtcdVersion = "v3.6.16"

// EtcdEnv is the environment variable that picks the etcd an Env starts:
// unset for EtcdVersion; EtcdDebian for Debian's etcd-server package (etcd
// 3.4, bin/etcd-debian); another version, v3.6.0 or later, that
// `ETCD_VERSION=... hack/install-tools.sh etcd` built (bin/etcd-<version>).
const EtcdEnv = "TESTENV_ETCD"

// EtcdDebian is EtcdEnv's value for Debian's etcd.
const EtcdDebian = "debian"

// EtcdInfo says which etcd an Env runs.
type EtcdInfo struct {
	// Source is EtcdDebian or the version built from the Go module
	// (e.g. "v3.6.16"); the binary is bin/etcd-<Source>.
	Source string `json:"source"`
	// Version is what the running etcd reports at /version, e.g. "3.6.16".
	Version string `json:"version"`
}

func (i EtcdInfo) String() string {
	if i.Source == EtcdDebian {
		return fmt.Sprintf("etcd %s (Debian's etcd-server, %s=%s)", i.Version, EtcdEnv, EtcdDebian)
	}
	return fmt.Sprintf("etcd %s (built from go.etcd.io/etcd/server/v3 %s)", i.Version, i.Source)
}

// ProgressRequests reports whether this etcd answers on-demand watch
// progress requests, as kube-apiserver decides it (its RequestWatchProgress
// storage feature, k8s.io/apiserver/pkg/storage/feature): 3.4.31 or later
// in 3.4, 3.5.13 or later, any 3.6. With them the API server serves
// consistent LISTs from its watch cache and streams watch-lists
// (sendInitialEvents); without, it sends LISTs to etcd and refuses
// watch-lists.
func (i EtcdInfo) ProgressRequests() bool {
	v, err := version.ParseSemantic(i.Version)
	if err != nil {
		return false
	}
	if v.LessThan(version.MajorMinor(3, 5)) {
		return v.AtLeast(version.MustParseSemantic("3.4.31"))
	}
	return v.AtLeast(version.MustParseSemantic("3.5.13"))
}

// etcdBinary is the file name in BinDir of the etcd for source.
func etcdBinary(source string) string { return "etcd-" + source }

var builtEtcd = regexp.MustCompile(`^v3\.([0-9]+)\.[0-9]+$`)

// etcdSource reads EtcdEnv.
func etcdSource() (string, error) {
	v := os.Getenv(EtcdEnv)
	switch {
	case v == "":
		return EtcdVersion, nil
	case v == EtcdDebian:
		return v, nil
	}
	// Releases before 3.6 take other flags (see etcdArgs).
	if m := builtEtcd.FindStringSubmatch(v); m != nil {
		if minor, _ := strconv.Atoi(m[1]); minor >= 6 {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s=%q: want %q (Debian's etcd 3.4) or an etcd version from v3.6.0 on that hack/install-tools.sh built (unset: %s)",
		EtcdEnv, v, EtcdDebian, EtcdVersion)
}

// etcdArgs are the flags for the etcd at client and peer, by its source.
func (e *Env) etcdArgs(client, peer string) []string {
	args := []string{
		"--name=testenv",
		"--data-dir=" + e.path(dirEtcdData),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=testenv=" + peer,
		"--listen-metrics-urls=",
		// Throwaway data: fsync only costs time (Debian's 3.4.23 accepts
		// it though its --help does not list it).
		"--unsafe-no-fsync",
		// 3.4 logs with capnslog unless told; zap is 3.6's only logger.
		"--logger=zap",
		"--log-outputs=stderr",
	}
	if e.Etcd.Source == EtcdDebian {
		// etcd 3.4.23 lacks on-demand progress requests, so without
		// periodic progress notifications the API server's watch cache
		// of a quiet resource never learns it is current, and every watch
		// from resourceVersion "" stalls 3 s. 100 ms costs about a tenth
		// of a core while idle. (The flag is also 3.5's name for it.)
		return append(args, "--experimental-watch-progress-notify-interval=100ms")
	}
	// 3.6 answers the API server's progress requests when it waits for its
	// watch cache, so nothing needs tuning: these are the behavioural
	// flags kubeadm 1.36 gives etcd (cmd/kubeadm/app/phases/etcd/local.go),
	// as a cluster runs it.
	return append(args,
		"--watch-progress-notify-interval=5s",
		"--feature-gates=InitialCorruptCheck=true",
		"--snapshot-count=10000",
	)
}

// readEtcdVersion records the running etcd's own version in e.Etcd.
func (e *Env) readEtcdVersion(ctx context.Context) error {
	url := "http://127.0.0.1:" + strconv.Itoa(e.ports.EtcdClient) + "/version"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := e.probe.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var v struct {
		Server string `json:"etcdserver"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &v) != nil || v.Server == "" {
		return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	e.Etcd.Version = v.Server
	return nil
}
