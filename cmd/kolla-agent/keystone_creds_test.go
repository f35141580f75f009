package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/certs"
	"github.com/kolla-agent/kolla-agent/internal/keystone"
	"github.com/kolla-agent/kolla-agent/internal/pki"
)

// keystoneToken asks Keystone for a token with scope (the JSON of auth.scope)
// as the bootstrap admin, and returns it with the user's ID.
func keystoneToken(t *testing.T, hc *http.Client, base, scope string) (token, userID string) {
	token, userID, _ = keystoneTokenIDs(t, hc, base, scope)
	return token, userID
}

// keystoneTokenIDs is keystoneToken with the project's ID too (a project scope).
func keystoneTokenIDs(t *testing.T, hc *http.Client, base, scope string) (token, userID, projectID string) {
	t.Helper()
	token, userID, projectID, err := keystone.Token(hc, base, keystone.AdminUser, keystone.AdminPassword, scope)
	if err != nil {
		t.Fatal(err)
	}
	return token, userID, projectID
}

const (
	systemScope  = `{"system":{"all":true}}`
	projectScope = `{"project":{"name":"admin","domain":{"name":"Default"}}}`
)

// endpointsOf lists the service's endpoints as "interface URL region",
// read with a token of scope.
func endpointsOf(t *testing.T, hc *http.Client, base, scope, name string) []string {
	t.Helper()
	token, _ := keystoneToken(t, hc, base, scope)
	eps, err := keystone.Endpoints(hc, base, token, name)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// noSecret fails t if out shows any of the secrets.
func noSecret(t *testing.T, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(out, s) {
			t.Errorf("the output shows a secret (%.4s...):\n%s", s, out)
		}
	}
}

func secretDir(t *testing.T, kv map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Keystone as production clouds run it: over TLS with a private CA (uWSGI's
// own https router), [oslo_policy] enforce_scope with the catalog given to
// system admins only, and two regions. Each
// credential layout operators use registers, and each refusal says what is
// missing.
func TestEndpointsKeystoneEnforcedScopeTLSRegions(t *testing.T) {
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	c, err := inst.Clone(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scope := "[oslo_policy]\nenforce_scope = true\nenforce_new_defaults = true\n"
	if err := os.WriteFile(filepath.Join(c.ConfigDir, "scope.conf"), []byte(scope), 0o644); err != nil {
		t.Fatal(err)
	}
	// Debian's Keystone (Zed) lets a project admin write the catalog; from
	// Wallaby to Yoga the defaults gave it to system admins only, and
	// clouds that keep those rules do it in policy.yaml, as here.
	var policy strings.Builder
	for _, rule := range []string{"list_services", "create_service", "list_regions", "create_region", "list_endpoints", "create_endpoint", "update_endpoint"} {
		fmt.Fprintf(&policy, "\"identity:%s\": \"role:admin and system_scope:all\"\n", rule)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "policy.yaml"), []byte(policy.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	caDir := t.TempDir()
	if err := pki.WritePrivateCA(caDir, "keystone test CA", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	c.TLS = &keystone.TLSFiles{CA: filepath.Join(caDir, "ca.pem"), Cert: filepath.Join(caDir, "server.pem"), Key: filepath.Join(caDir, "server.key")}
	ks := c.Start(t, 0)
	if _, err := ks.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	roots, err := certs.Pool(c.TLS.CA)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	caPEM := mustRead(t, c.TLS.CA)

	ns := namespace(t)
	name := "glance-" + ns[len(ns)-5:]
	env := exposureEnv(t, ns)
	run := func(creds, region string, extraEnv ...string) *agentProc {
		t.Helper()
		y := fmt.Sprintf("namespace: %s\nbootstrap:\n  endpoints:\n    type: image\n    name: %s\n    public: {url: \"https://glance.example:9292\"}\n", ns, name)
		if creds != "" {
			y += "    credentials: " + creds + "\n"
		}
		if region != "" {
			y += "    region: " + region + "\n"
		}
		return startAgent(t, withEnv(env, extraEnv...), "--config", agentYAML(t, y), "endpoints")
	}
	wantOut := func(a *agentProc, code int, parts ...string) {
		t.Helper()
		a.wantExit(code)
		// The password reached the agent through a Secret file, clouds.yaml
		// or the environment; a 401, a 403 or a TLS failure must not show it.
		if strings.Contains(a.out.String(), keystone.AdminPassword) {
			t.Errorf("the output shows the admin password:\n%s", a.out.String())
		}
		for _, p := range parts {
			if !strings.Contains(a.out.String(), p) {
				t.Errorf("output lacks %q:\n%s", p, a.out.String())
			}
		}
	}
	system := map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": keystone.AdminUser, "OS_PASSWORD": keystone.AdminPassword,
		"OS_USER_DOMAIN_NAME": "Default", "OS_SYSTEM_SCOPE": "all", "OS_CACERT": c.TLS.CA, "OS_REGION_NAME": "RegionOne"}
	with := func(base map[string]string, set ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(set); i += 2 {
			if set[i+1] == "" {
				delete(m, set[i])
			} else {
				m[set[i]] = set[i+1]
			}
		}
		return m
	}

	// openstack-helm's keystone-admin Secret is project-scoped: refused,
	// with what to change.
	project := with(system, "OS_SYSTEM_SCOPE", "", "OS_PROJECT_NAME", keystone.AdminProject, "OS_PROJECT_DOMAIN_NAME", "Default")
	wantOut(run(secretDir(t, project), ""), 2, "but got 403 instead", "wants a system-scoped token", "OS_SYSTEM_SCOPE=all")
	// The private CA not given: the TLS failure, not a silent skip.
	wantOut(run(secretDir(t, with(system, "OS_CACERT", "")), ""), 2, "certificate signed by unknown authority")
	// The right CA, another name (the certificate is for 127.0.0.1).
	wrongName := strings.Replace(ks.URL, "127.0.0.1", "localhost", 1) + "/v3"
	wantOut(run(secretDir(t, with(system, "OS_AUTH_URL", wrongName)), ""), 2, "x509: certificate is not valid for any names, but wanted to match localhost")
	// The CA as the Secret's PEM itself; region RegionOne from OS_REGION_NAME.
	wantOut(run(secretDir(t, with(system, "OS_CACERT", caPEM)), ""), 0, "create public endpoint of "+name+" in RegionOne")
	if got := endpointsOf(t, hc, ks.URL, systemScope, name); !slices.Equal(got, []string{"public https://glance.example:9292 RegionOne"}) {
		t.Fatalf("catalog %q", got)
	}

	// A second region: its own endpoint; RegionOne's is left as it is.
	wantOut(run(secretDir(t, with(system, "OS_REGION_NAME", "RegionTwo")), ""), 0, "create region: RegionTwo", "in RegionTwo")
	want := []string{"public https://glance.example:9292 RegionOne", "public https://glance.example:9292 RegionTwo"}
	if got := endpointsOf(t, hc, ks.URL, systemScope, name); !slices.Equal(got, want) {
		t.Fatalf("catalog %q, want %q", got, want)
	}
	// Two regions and none configured: no guess.
	wantOut(run(secretDir(t, with(system, "OS_REGION_NAME", "")), ""), 2, "RegionOne, RegionTwo", "not guessing")
	// agent.yaml and the Secret disagree: refused before any write.
	wantOut(run(secretDir(t, system), "RegionTwo"), 1, "bootstrap.endpoints.region is RegionTwo", "OS_REGION_NAME=RegionOne")

	// kolla-ansible's clouds.yaml, its system-scoped cloud, with OS_CLOUD.
	clouds := fmt.Sprintf(`clouds:
  kolla-admin-system:
    auth:
      auth_url: %s
      username: %s
      password: %s
      user_domain_name: Default
      system_scope: all
    region_name: RegionTwo
    cacert: %s
`, ks.URL, keystone.AdminUser, keystone.AdminPassword, c.TLS.CA)
	wantOut(run(secretDir(t, map[string]string{"OS_CLOUD": "kolla-admin-system", "clouds.yaml": clouds}), ""), 0, "the catalog is up to date")
	// The environment, no directory (a Job's env from secretKeyRef).
	var envCreds []string
	for k, v := range with(system, "OS_REGION_NAME", "RegionTwo") {
		envCreds = append(envCreds, k+"="+v)
	}
	wantOut(run("", "", envCreds...), 0, "the catalog is up to date")
	if got := endpointsOf(t, hc, ks.URL, systemScope, name); !slices.Equal(got, want) {
		t.Fatalf("catalog after the no-op runs %q, want %q", got, want)
	}
	// OS_INTERFACE: identity calls go to the token catalog's identity
	// endpoint of that interface and region (here keystone's own internal
	// one, registered by the agent); none there is an error naming it.
	ident := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  endpoints:\n    credentials: %s\n    type: identity\n    name: keystone\n    internal: {url: %q}\n",
		ns, secretDir(t, with(system, "OS_REGION_NAME", "RegionTwo")), ks.URL+"/v3"))
	startAgent(t, env, "--config", ident, "endpoints").wantExit(0)
	wantOut(run(secretDir(t, with(system, "OS_REGION_NAME", "RegionTwo", "OS_INTERFACE", "internal")), ""), 0, "the catalog is up to date")
	wantOut(run(secretDir(t, with(system, "OS_REGION_NAME", "RegionTwo", "OS_INTERFACE", "admin")), ""), 2, "the admin identity endpoint of region RegionTwo")
	// The insecure switch exists and is off unless asked for.
	wantOut(run(secretDir(t, with(system, "OS_CACERT", "", "OS_INSECURE", "true")), ""), 0, "the catalog is up to date")
}

// An application credential (OS_AUTH_TYPE=v3applicationcredential), made
// by the admin for itself, registers in the real Keystone; its scope is
// the credential's own (the Secret's OS_PROJECT_* are not sent). A token
// (OS_AUTH_TYPE=token) and the user and project by IDs work too.
func TestEndpointsApplicationCredential(t *testing.T) {
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	ks := inst.Start(t, 0)
	if _, err := ks.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	name := "glance-" + ns[len(ns)-5:]
	hc := &http.Client{Timeout: 30 * time.Second}
	token, user := keystoneToken(t, hc, ks.URL, projectScope)
	req, _ := http.NewRequest("POST", ks.URL+"/v3/users/"+user+"/application_credentials",
		strings.NewReader(`{"application_credential":{"name":"`+name+`"}}`))
	req.Header.Set("X-Auth-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ac struct {
		Cred struct{ ID, Secret string } `json:"application_credential"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ac)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || ac.Cred.Secret == "" {
		t.Fatalf("application credential: %s %v", resp.Status, err)
	}
	creds := secretDir(t, map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_AUTH_TYPE": "v3applicationcredential",
		"OS_APPLICATION_CREDENTIAL_ID": ac.Cred.ID, "OS_APPLICATION_CREDENTIAL_SECRET": ac.Cred.Secret,
		"OS_PROJECT_NAME": keystone.AdminProject, "OS_REGION_NAME": "RegionOne"})
	cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  endpoints:\n    credentials: %s\n    type: image\n    name: %s\n    internal: {url: \"http://glance-api:9292\"}\n", ns, creds, name))
	a := startAgent(t, exposureEnv(t, ns), "--config", cfg, "endpoints")
	a.wantExit(0)
	if got := endpointsOf(t, hc, ks.URL, projectScope, name); !slices.Equal(got, []string{"internal http://glance-api:9292 RegionOne"}) {
		t.Fatalf("catalog %q\n%s", got, a.out.String())
	}
	// A token (OS_AUTH_TYPE=token), and the user and project by their IDs:
	// the catalog is as it was.
	_, userID, projectID := keystoneTokenIDs(t, hc, ks.URL, projectScope)
	tok, _ := keystoneToken(t, hc, ks.URL, projectScope)
	for what, kv := range map[string]map[string]string{
		"token": {"OS_AUTH_URL": ks.URL + "/v3", "OS_AUTH_TYPE": "token", "OS_TOKEN": tok, "OS_PROJECT_ID": projectID, "OS_REGION_NAME": "RegionOne"},
		"IDs":   {"OS_AUTH_URL": ks.URL + "/v3", "OS_USER_ID": userID, "OS_PASSWORD": keystone.AdminPassword, "OS_PROJECT_ID": projectID, "OS_REGION_NAME": "RegionOne"},
	} {
		y := fmt.Sprintf("namespace: %s\nbootstrap:\n  endpoints:\n    credentials: %s\n    type: image\n    name: %s\n    internal: {url: \"http://glance-api:9292\"}\n", ns, secretDir(t, kv), name)
		a := startAgent(t, exposureEnv(t, ns), "--config", agentYAML(t, y), "endpoints")
		a.wantExit(0)
		if !strings.Contains(a.out.String(), "the catalog is up to date") {
			t.Errorf("%s:\n%s", what, a.out.String())
		}
		noSecret(t, a.out.String(), tok, keystone.AdminPassword, ac.Cred.Secret)
	}
	os.WriteFile(filepath.Join(creds, "OS_APPLICATION_CREDENTIAL_SECRET"), []byte("wrong"), 0o600)
	bad := startAgent(t, exposureEnv(t, ns), "--config", cfg, "endpoints")
	bad.wantExit(2)
	if out := bad.out.String(); !strings.Contains(out, "application credential "+ac.Cred.ID) || !strings.Contains(out, "but got 401 instead") { // gophercloud's words for the answer's code: a bare "401" could be any digits
		t.Errorf("a wrong secret:\n%s", out)
	}
	noSecret(t, a.out.String()+bad.out.String(), ac.Cred.Secret, token)
}
