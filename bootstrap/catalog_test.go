package bootstrap

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/kolla-agent/kolla-agent/internal/pki"
)

func writeDir(t testing.TB, kv map[string]string) string {
	dir := t.TempDir()
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// openstack-helm's keystone-admin Secret, as helm-toolkit's
// secret-keystone.yaml writes it (plus what each case changes).
var helmAdmin = map[string]string{
	"OS_AUTH_URL":            "http://keystone.openstack.svc.cluster.local:80/v3\n",
	"OS_REGION_NAME":         "RegionOne",
	"OS_INTERFACE":           "internal",
	"OS_ENDPOINT_TYPE":       "internal",
	"OS_PROJECT_DOMAIN_NAME": "default",
	"OS_PROJECT_NAME":        "admin",
	"OS_USER_DOMAIN_NAME":    "default",
	"OS_USERNAME":            "admin",
	"OS_PASSWORD":            "secret\n",
	"OS_DEFAULT_DOMAIN":      "default",
}

func TestReadCredentials(t *testing.T) {
	c, err := ReadCredentials(writeDir(t, helmAdmin))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Auth
	if a.IdentityEndpoint != "http://keystone.openstack.svc.cluster.local:80/v3" || a.Password != "secret" || a.Username != "admin" ||
		a.DomainName != "default" || c.Region != "RegionOne" || c.Interface != "internal" || c.TLS != nil ||
		a.Scope == nil || a.Scope.ProjectName != "admin" || a.Scope.DomainName != "default" || a.Scope.System {
		t.Fatalf("%+v %+v", c, a.Scope)
	}

	for _, tc := range []struct {
		name string
		set  map[string]string // "" deletes
		want func(Credentials) bool
	}{
		{"domains default to Default by name", map[string]string{"OS_USER_DOMAIN_NAME": "", "OS_PROJECT_DOMAIN_NAME": "", "OS_DEFAULT_DOMAIN": ""},
			func(c Credentials) bool {
				return c.Auth.DomainName == "Default" && c.Auth.Scope.DomainName == "Default"
			}},
		{"OS_DEFAULT_DOMAIN is an ID", map[string]string{"OS_USER_DOMAIN_NAME": "", "OS_PROJECT_DOMAIN_NAME": ""},
			func(c Credentials) bool { return c.Auth.DomainID == "default" && c.Auth.Scope.DomainID == "default" }},
		{"system scope", map[string]string{"OS_PROJECT_NAME": "", "OS_PROJECT_DOMAIN_NAME": "", "OS_SYSTEM_SCOPE": "all"},
			func(c Credentials) bool { return c.Auth.Scope.System && c.Auth.Scope.ProjectName == "" }},
		{"IDs", map[string]string{"OS_USERNAME": "", "OS_USER_ID": "u1", "OS_PROJECT_NAME": "", "OS_PROJECT_ID": "p1"},
			func(c Credentials) bool {
				return c.Auth.UserID == "u1" && c.Auth.DomainName == "" && c.Auth.Scope.ProjectID == "p1"
			}},
		{"domain scope", map[string]string{"OS_PROJECT_NAME": "", "OS_DOMAIN_NAME": "heat"},
			func(c Credentials) bool { return c.Auth.Scope.DomainName == "heat" }},
		{"application credential ignores the project", map[string]string{"OS_PASSWORD": "", "OS_AUTH_TYPE": "v3applicationcredential", "OS_APPLICATION_CREDENTIAL_ID": "ac1", "OS_APPLICATION_CREDENTIAL_SECRET": "s"},
			func(c Credentials) bool {
				return c.Auth.ApplicationCredentialID == "ac1" && c.Auth.ApplicationCredentialSecret == "s" && c.Auth.Scope == nil && c.Auth.Password == ""
			}},
		{"application credential inferred", map[string]string{"OS_PASSWORD": "", "OS_APPLICATION_CREDENTIAL_NAME": "agent", "OS_APPLICATION_CREDENTIAL_SECRET": "s"},
			func(c Credentials) bool {
				return c.Auth.ApplicationCredentialName == "agent" && c.Auth.Username == "admin" && c.Auth.DomainName == "default"
			}},
		{"token", map[string]string{"OS_PASSWORD": "", "OS_TOKEN": "tok"},
			func(c Credentials) bool { return c.Auth.TokenID == "tok" && c.Auth.Scope.ProjectName == "admin" }},
		{"publicURL", map[string]string{"OS_INTERFACE": "", "OS_ENDPOINT_TYPE": "publicURL"},
			func(c Credentials) bool { return c.Interface == "public" }},
		{"insecure", map[string]string{"OS_INSECURE": "true"},
			func(c Credentials) bool { return c.TLS != nil && c.TLS.InsecureSkipVerify }},
		{"not insecure", map[string]string{"OS_INSECURE": "false"},
			func(c Credentials) bool { return c.TLS != nil && !c.TLS.InsecureSkipVerify }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := map[string]string{}
			for k, v := range helmAdmin {
				kv[k] = v
			}
			for k, v := range tc.set {
				if v == "" {
					delete(kv, k)
				} else {
					kv[k] = v
				}
			}
			c, err := ReadCredentials(writeDir(t, kv))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Fatalf("%+v scope %+v", c.Auth, c.Auth.Scope)
			}
		})
	}
}

// Every refusal names the file (or variable) and what is missing.
func TestReadCredentialsErrors(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	for _, tc := range []struct {
		name string
		set  map[string]string
		want string
	}{
		{"no password", map[string]string{"OS_PASSWORD": ""}, "missing OS_PASSWORD (auth type password)"},
		{"empty user", map[string]string{"OS_USERNAME": " \n"}, "missing OS_USERNAME (or OS_USER_ID)"},
		{"no URL", map[string]string{"OS_AUTH_URL": ""}, "missing OS_AUTH_URL"},
		{"bad URL", map[string]string{"OS_AUTH_URL": "keystone"}, `/OS_AUTH_URL: "keystone" is not an http or https URL`},
		// A URL with credentials in it is shown redacted.
		{"bad URL with a password", map[string]string{"OS_AUTH_URL": "ftp://admin:s3cret@keystone/v3"}, `/OS_AUTH_URL: "ftp://admin:***@keystone/v3" is not an http or https URL`},
		{"no scope", map[string]string{"OS_PROJECT_NAME": ""}, "missing a scope: OS_SYSTEM_SCOPE=all, OS_PROJECT_NAME"},
		{"two scopes", map[string]string{"OS_SYSTEM_SCOPE": "all"}, "/OS_SYSTEM_SCOPE and /"},
		{"system scope not all", map[string]string{"OS_PROJECT_NAME": "", "OS_SYSTEM_SCOPE": "yes"}, `/OS_SYSTEM_SCOPE: "yes": Keystone's only system scope is "all"`},
		{"unknown auth type", map[string]string{"OS_AUTH_TYPE": "v3oidcpassword"}, `/OS_AUTH_TYPE: "v3oidcpassword" is not an auth type`},
		{"app cred without secret", map[string]string{"OS_AUTH_TYPE": "v3applicationcredential", "OS_APPLICATION_CREDENTIAL_ID": "x"}, "missing OS_APPLICATION_CREDENTIAL_SECRET"},
		{"app cred name without user", map[string]string{"OS_AUTH_TYPE": "v3applicationcredential", "OS_USERNAME": "", "OS_APPLICATION_CREDENTIAL_NAME": "n", "OS_APPLICATION_CREDENTIAL_SECRET": "s"}, "missing OS_USERNAME (or OS_USER_ID), for OS_APPLICATION_CREDENTIAL_NAME"},
		{"CA file missing", map[string]string{"OS_CACERT": "/nonexistent/ca.crt"}, "/OS_CACERT: open /nonexistent/ca.crt: no such file"},
		{"CA not PEM", map[string]string{"OS_CACERT": notPEM}, "/OS_CACERT: " + notPEM + ": no PEM certificate in it"},
		{"insecure not a bool", map[string]string{"OS_INSECURE": "maybe"}, `/OS_INSECURE: "maybe" is not true or false`},
		{"cert without key", map[string]string{"OS_CERT": "/c.pem"}, "OS_CERT and OS_KEY go together"},
		{"cloud without clouds.yaml", map[string]string{"OS_CLOUD": "kolla-admin-system"}, "OS_CLOUD=kolla-admin-system, but there is no clouds.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := map[string]string{}
			for k, v := range helmAdmin {
				kv[k] = v
			}
			for k, v := range tc.set {
				if v == "" {
					delete(kv, k)
				} else {
					kv[k] = v
				}
			}
			_, err := ReadCredentials(writeDir(t, kv))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := ReadCredentials("/nonexistent/keystone-admin"); err == nil || !strings.Contains(err.Error(), "/nonexistent/keystone-admin") {
		t.Errorf("missing directory: %v", err)
	}
}

// The environment when no directory is configured (a Deployment's env
// from secretKeyRef, as openstack-helm's ks-endpoints Jobs do).
func TestReadCredentialsEnvironment(t *testing.T) {
	for k, v := range helmAdmin {
		t.Setenv(k, strings.TrimSpace(v))
	}
	t.Setenv("OS_PASSWORD", "")
	_, err := ReadCredentials("")
	if err == nil || !strings.Contains(err.Error(), "the environment: missing OS_PASSWORD") {
		t.Fatalf("%v", err)
	}
	t.Setenv("OS_PASSWORD", "from-env")
	c, err := ReadCredentials("")
	if err != nil || c.Auth.Password != "from-env" || c.Region != "RegionOne" || c.From != "the environment" {
		t.Fatalf("%+v %v", c, err)
	}
	t.Setenv("OS_AUTH_URL", "nope")
	if _, err := ReadCredentials(""); err == nil || !strings.Contains(err.Error(), `environment variable OS_AUTH_URL: "nope"`) {
		t.Fatalf("%v", err)
	}
}

// clouds.yaml + OS_CLOUD, as kolla-ansible writes /etc/kolla/clouds.yaml:
// its kolla-admin-system cloud is system scoped, with the CA beside it.
func TestReadCredentialsClouds(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"OS_CLOUD":       "kolla-admin-system",
		"OS_REGION_NAME": "RegionTwo", // beside it, wins
	})
	if err := pki.WritePrivateCA(dir, "test CA", "keystone.example"); err != nil {
		t.Fatal(err)
	}
	cloudsYAML := `clouds:
  kolla-admin-system:
    auth:
      auth_url: https://keystone.example:5000
      username: admin
      password: s3cret
      user_domain_name: Default
      system_scope: all
    region_name: RegionOne
    interface: internal
    cacert: ` + filepath.Join(dir, "ca.pem") + `
  kolla-admin:
    auth:
      auth_url: https://keystone.example:5000
      username: admin
      password: s3cret
      user_domain_name: Default
      project_name: admin
      project_domain_name: Default
`
	os.WriteFile(filepath.Join(dir, "clouds.yaml"), []byte(cloudsYAML), 0o600)
	c, err := ReadCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.IdentityEndpoint != "https://keystone.example:5000" || c.Auth.Password != "s3cret" || c.Auth.Scope == nil || !c.Auth.Scope.System ||
		c.Auth.TenantName != "" || c.Region != "RegionTwo" || c.Interface != "internal" || c.TLS == nil || c.TLS.RootCAs == nil {
		t.Fatalf("%+v %+v", c, c.Auth.Scope)
	}
	os.WriteFile(filepath.Join(dir, "OS_CLOUD"), []byte("nowhere"), 0o600)
	if _, err := ReadCredentials(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "clouds.yaml")+`: cloud nowhere: cloud "nowhere" not found`) {
		t.Fatalf("%v", err)
	}
}

// No credential crosses to another host on a redirect: Keystone behind a
// proxy that redirects POST /v3/auth/tokens (307 keeps the body) elsewhere
// must not make the agent send the password there.
func TestRegisterRedirectNotFollowed(t *testing.T) {
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "secret") || r.Header.Get("X-Auth-Token") != "" {
			leaked.Add(1)
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer elsewhere.Close()
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		keystone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+r.URL.Path, code)
		}))
		kv := map[string]string{"OS_AUTH_URL": keystone.URL + "/v3", "OS_USERNAME": "admin", "OS_PASSWORD": "secret", "OS_SYSTEM_SCOPE": "all"}
		c, err := ReadCredentials(writeDir(t, kv))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Register(context.Background(), c, Registration{Type: "image", Name: "glance", URLs: map[string]string{"public": "http://g"}}, false)
		keystone.Close()
		if err == nil || !strings.Contains(err.Error(), "not followed, the request carries credentials") {
			t.Errorf("%d: %v", code, err)
		}
	}
	if n := leaked.Load(); n != 0 {
		t.Fatalf("%d requests with credentials reached the other host", n)
	}
}

// gophercloud builds the token request from the credentials: the password
// case's body names the user's domain and the system scope, and an
// application credential carries no scope (Keystone refuses one).
func TestTokenRequestBody(t *testing.T) {
	var bodies []string
	ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer ks.Close()
	for _, kv := range []map[string]string{
		{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": "admin", "OS_PASSWORD": "pw", "OS_USER_DOMAIN_NAME": "Default", "OS_SYSTEM_SCOPE": "all"},
		{"OS_AUTH_URL": ks.URL + "/v3", "OS_APPLICATION_CREDENTIAL_ID": "ac1", "OS_APPLICATION_CREDENTIAL_SECRET": "s", "OS_PROJECT_NAME": "admin"},
	} {
		c, err := ReadCredentials(writeDir(t, kv))
		if err != nil {
			t.Fatal(err)
		}
		_, err = identityClient(context.Background(), c)
		if !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
			t.Fatalf("%v", err)
		}
	}
	if len(bodies) != 2 ||
		!strings.Contains(bodies[0], `"domain":{"name":"Default"}`) || !strings.Contains(bodies[0], `"scope":{"system":{"all":true}}`) ||
		!strings.Contains(bodies[1], `"application_credential":{"id":"ac1","secret":"s"}`) || strings.Contains(bodies[1], "scope") {
		t.Fatalf("%q", bodies)
	}
}

// FuzzReadCredentials: any Secret either is refused with an error naming
// its directory (or a file in it) or gives credentials gophercloud can
// send: an http(s) auth URL, one way to authenticate, and a scope unless
// an application credential carries its own.
func FuzzReadCredentials(f *testing.F) {
	f.Add("http://keystone:5000/v3", "", "admin", "secret", "all", "", "", "")
	f.Add("https://k/v3", "v3applicationcredential", "", "", "", "admin", "-----BEGIN CERTIFICATE-----", "true")
	f.Add("http://k", "token", "u", "", "", "p", "", "0")
	f.Fuzz(func(t *testing.T, authURL, authType, user, password, system, project, cacert, insecure string) {
		kv := map[string]string{}
		for k, v := range map[string]string{"OS_AUTH_URL": authURL, "OS_AUTH_TYPE": authType, "OS_USERNAME": user, "OS_PASSWORD": password,
			"OS_SYSTEM_SCOPE": system, "OS_PROJECT_NAME": project, "OS_CACERT": cacert, "OS_INSECURE": insecure,
			"OS_APPLICATION_CREDENTIAL_SECRET": password, "OS_TOKEN": user} {
			if v != "" && !strings.ContainsRune(v, 0) {
				kv[k] = v
			}
		}
		dir := writeDir(t, kv)
		c, err := ReadCredentials(dir)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error does not name %s: %v", dir, err)
			}
			return
		}
		if err := checkAuthURL(c.Auth.IdentityEndpoint); err != nil {
			t.Fatal(err)
		}
		a := c.Auth
		ways := 0
		for _, set := range []bool{a.Password != "", a.ApplicationCredentialSecret != "", a.TokenID != ""} {
			if set {
				ways++
			}
		}
		appCred := a.ApplicationCredentialSecret != ""
		if ways != 1 || (a.Scope == nil) != appCred {
			t.Fatalf("%+v scope %+v", a, a.Scope)
		}
	})
}
