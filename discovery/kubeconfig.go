package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// LoadKubeconfig reads a kubeconfig file for its current context: the
// server, its CA, and the user's client certificate, token or basic
// credentials, relative file paths taken from the file's directory. It is
// the part of client-go's clientcmd an agent outside a cluster needs;
// clientcmd itself (merging several files, auth-provider and exec plugins)
// would cost the binary several hundred KB. A user with an exec plugin or
// an auth provider is refused, naming it.
func LoadKubeconfig(path string) (*rest.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, err
	}
	ctxName := kc.CurrentContext
	var ctx *clientcmdv1.Context
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == ctxName || (ctxName == "" && len(kc.Contexts) == 1) {
			ctx = &kc.Contexts[i].Context
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("current-context %q: no such context", ctxName)
	}
	var cluster *clientcmdv1.Cluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == ctx.Cluster {
			cluster = &kc.Clusters[i].Cluster
		}
	}
	if cluster == nil || cluster.Server == "" {
		return nil, fmt.Errorf("context %q: cluster %q has no server", ctxName, ctx.Cluster)
	}
	var user clientcmdv1.AuthInfo
	for i := range kc.AuthInfos {
		if kc.AuthInfos[i].Name == ctx.AuthInfo {
			user = kc.AuthInfos[i].AuthInfo
		}
	}
	switch {
	case user.Exec != nil:
		return nil, fmt.Errorf("user %q: exec credential plugins are not supported (use a token or a client certificate)", ctx.AuthInfo)
	case user.AuthProvider != nil:
		return nil, fmt.Errorf("user %q: auth providers are not supported (use a token or a client certificate)", ctx.AuthInfo)
	}
	dir := filepath.Dir(path)
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	cfg := &rest.Config{
		Host: cluster.Server,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   cluster.InsecureSkipTLSVerify,
			ServerName: cluster.TLSServerName,
			CAFile:     abs(cluster.CertificateAuthority),
			CAData:     cluster.CertificateAuthorityData,
			CertFile:   abs(user.ClientCertificate),
			CertData:   user.ClientCertificateData,
			KeyFile:    abs(user.ClientKey),
			KeyData:    user.ClientKeyData,
		},
		BearerToken:     user.Token,
		BearerTokenFile: abs(user.TokenFile),
		Username:        user.Username,
		Password:        user.Password,
	}
	if cfg.BearerTokenFile != "" && cfg.BearerToken == "" {
		tok, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("user %q: tokenFile: %w", ctx.AuthInfo, err)
		}
		cfg.BearerToken = string(tok)
	}
	if cfg.Host == "" {
		return nil, errors.New("no server")
	}
	return cfg, nil
}
