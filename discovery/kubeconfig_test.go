package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("s3cret"), 0o600)
	write := func(s string) string {
		p := filepath.Join(dir, "kubeconfig")
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	const base = `apiVersion: v1
kind: Config
current-context: agent
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: agent
  context: {cluster: testenv, user: kolla-agent}
clusters:
- name: testenv
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt, tls-server-name: kubernetes}
`
	cfg, err := LoadKubeconfig(write(base + `users:
- name: kolla-agent
  user: {tokenFile: token, client-certificate: tls.crt, client-key: /abs/tls.key}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "s3cret" || cfg.TLSClientConfig.CAFile != filepath.Join(dir, "ca.crt") ||
		cfg.TLSClientConfig.CertFile != filepath.Join(dir, "tls.crt") || cfg.TLSClientConfig.KeyFile != "/abs/tls.key" || cfg.TLSClientConfig.ServerName != "kubernetes" {
		t.Errorf("config %+v", cfg)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"exec plugin", base + "users:\n- name: kolla-agent\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}\n", `user "kolla-agent": exec credential plugins are not supported`},
		{"auth provider", base + "users:\n- name: kolla-agent\n  user:\n    auth-provider: {name: oidc}\n", "auth providers are not supported"},
		{"no such context", strings.Replace(base, "current-context: agent", "current-context: gone", 1), `current-context "gone": no such context`},
		{"no server", strings.Replace(base, `server: "https://127.0.0.1:6443", `, "", 1), `cluster "testenv" has no server`},
		{"missing token file", base + "users:\n- name: kolla-agent\n  user: {tokenFile: nope}\n", "tokenFile"},
		{"not yaml", "{", "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadKubeconfig(write(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
