package bootstrap

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"

	"github.com/kolla-agent/kolla-agent/certs"
	"github.com/kolla-agent/kolla-agent/redact"
)

// Credentials are how the agent authenticates to Keystone, read from the
// OS_* names python-openstackclient reads: a mounted Secret with one file
// per name (openstack-helm's keystone-admin Secret), the environment, or a
// clouds.yaml entry named by OS_CLOUD (kolla-ansible's kolla-admin-system).
type Credentials struct {
	// Auth is what gophercloud authenticates with; IdentityEndpoint is
	// OS_AUTH_URL.
	Auth gophercloud.AuthOptions
	// Region is OS_REGION_NAME: the catalog region the agent writes and
	// the identity endpoint it picks from the token's catalog.
	Region string
	// Interface is OS_INTERFACE (or OS_ENDPOINT_TYPE): when set, identity
	// calls after authentication go to the catalog's identity endpoint of
	// that interface and Region, as openstackclient does; when empty, to
	// OS_AUTH_URL.
	Interface string
	// TLS is the client's TLS configuration: OS_CACERT, OS_CERT/OS_KEY,
	// OS_INSECURE. nil means the system's roots.
	TLS *tls.Config
	// From says where the credentials were read, for messages.
	From string
}

// An envSource looks one OS_* name up, saying where the value was found.
type envSource interface {
	lookup(name string) (value, where string, ok bool, err error)
	describe() string
}

// dirSource is a mounted Secret: one file per name, trailing blanks and
// newlines dropped (kubectl create secret --from-literal adds none, editors
// add one).
type dirSource string

func (d dirSource) lookup(name string) (string, string, bool, error) {
	p := filepath.Join(string(d), name)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", p, false, nil
	}
	if err != nil {
		return "", p, false, err
	}
	return strings.TrimSpace(string(b)), p, true, nil
}

func (d dirSource) describe() string { return "directory " + string(d) }

// envVars is the process environment (a Deployment's env: from a Secret).
type envVars func(string) (string, bool)

func (e envVars) lookup(name string) (string, string, bool, error) {
	v, ok := e(name)
	return strings.TrimSpace(v), "environment variable " + name, ok, nil
}

func (envVars) describe() string { return "the environment" }

// ReadCredentials reads the OS_* names from the files of dir, or from the
// environment when dir is "". Errors name the file or variable and say
// what is missing.
func ReadCredentials(dir string) (Credentials, error) {
	if dir == "" {
		return readCredentials(envVars(os.LookupEnv), "")
	}
	if fi, err := os.Stat(dir); err != nil {
		return Credentials{}, err
	} else if !fi.IsDir() {
		return Credentials{}, fmt.Errorf("%s: not a directory (a mounted Secret with one file per OS_* name)", dir)
	}
	return readCredentials(dirSource(dir), dir)
}

// credReader collects the names read and the first error.
type credReader struct {
	src envSource
	err error
	// where each name was found, for messages about a value.
	where map[string]string
}

func (r *credReader) get(names ...string) string {
	for _, n := range names {
		v, where, ok, err := r.src.lookup(n)
		if err != nil && r.err == nil {
			r.err = err
		}
		if ok && v != "" {
			r.where[n] = where
			return v
		}
	}
	return ""
}

// at names where a value came from: the file or variable, or the name
// (with the source) when it was not given.
func (r *credReader) at(name string) string {
	if w, ok := r.where[name]; ok {
		return w
	}
	return name + " (in " + r.src.describe() + ")"
}

func readCredentials(src envSource, dir string) (Credentials, error) {
	r := &credReader{src: src, where: map[string]string{}}
	c := Credentials{From: src.describe()}
	region := r.get("OS_REGION_NAME")
	iface := r.get("OS_INTERFACE", "OS_ENDPOINT_TYPE")
	if cloud := r.get("OS_CLOUD"); cloud != "" {
		if r.err != nil {
			return Credentials{}, r.err
		}
		return fromClouds(r, cloud, dir, region, iface)
	}
	c.Region = region
	c.Interface = normInterface(iface)
	c.Auth.IdentityEndpoint = r.get("OS_AUTH_URL")
	authType := strings.ToLower(r.get("OS_AUTH_TYPE"))
	defDomain := r.get("OS_DEFAULT_DOMAIN", "OS_DEFAULT_DOMAIN_ID")
	user := func() {
		c.Auth.UserID = r.get("OS_USER_ID")
		c.Auth.Username = r.get("OS_USERNAME")
		if c.Auth.UserID == "" {
			c.Auth.DomainID = r.get("OS_USER_DOMAIN_ID")
			c.Auth.DomainName = r.get("OS_USER_DOMAIN_NAME")
			if c.Auth.DomainID == "" && c.Auth.DomainName == "" {
				c.Auth.DomainID, c.Auth.DomainName = defaultDomain(defDomain)
			}
		}
	}
	appCredID, appCredName, appCredSecret := r.get("OS_APPLICATION_CREDENTIAL_ID"), r.get("OS_APPLICATION_CREDENTIAL_NAME"), r.get("OS_APPLICATION_CREDENTIAL_SECRET")
	token := r.get("OS_TOKEN")
	password := r.get("OS_PASSWORD")
	if authType == "" { // what the names given imply, as keystoneauth's loader does
		switch {
		case password != "":
			authType = "password"
		case appCredSecret != "":
			authType = "v3applicationcredential"
		case token != "":
			authType = "token"
		default:
			authType = "password"
		}
	}
	var missing []string
	need := func(name, v string) {
		if v == "" {
			missing = append(missing, name)
		}
	}
	scoped := true
	switch authType {
	case "password", "v3password":
		user()
		c.Auth.Password = password
		need("OS_PASSWORD", password)
		if c.Auth.UserID == "" {
			need("OS_USERNAME (or OS_USER_ID)", c.Auth.Username)
		}
	case "v3applicationcredential", "applicationcredential":
		// The application credential carries its scope: Keystone refuses a
		// scope in the request, so OS_PROJECT_* (present in most Secrets)
		// are left unread.
		scoped = false
		c.Auth.ApplicationCredentialID, c.Auth.ApplicationCredentialName, c.Auth.ApplicationCredentialSecret = appCredID, appCredName, appCredSecret
		need("OS_APPLICATION_CREDENTIAL_SECRET", appCredSecret)
		if appCredID == "" {
			need("OS_APPLICATION_CREDENTIAL_ID (or OS_APPLICATION_CREDENTIAL_NAME with OS_USERNAME or OS_USER_ID)", appCredName)
			if appCredName != "" {
				user()
				if c.Auth.UserID == "" {
					need("OS_USERNAME (or OS_USER_ID), for OS_APPLICATION_CREDENTIAL_NAME", c.Auth.Username)
				}
			}
		}
	case "token", "v3token":
		c.Auth.TokenID = token
		need("OS_TOKEN", token)
	default:
		return Credentials{}, fmt.Errorf("%s: %q is not an auth type the agent knows (password, v3applicationcredential, token)", r.at("OS_AUTH_TYPE"), authType)
	}
	if scoped {
		scope, err := readScope(r, defDomain)
		if err != nil {
			return Credentials{}, err
		}
		c.Auth.Scope = scope
		if scope == nil {
			missing = append(missing, "a scope: OS_SYSTEM_SCOPE=all, OS_PROJECT_NAME or OS_PROJECT_ID, or OS_DOMAIN_NAME or OS_DOMAIN_ID")
		}
	}
	need("OS_AUTH_URL", c.Auth.IdentityEndpoint)
	if r.err != nil {
		return Credentials{}, r.err
	}
	if len(missing) > 0 {
		return Credentials{}, fmt.Errorf("%s: missing %s (auth type %s)", src.describe(), strings.Join(missing, "; "), authType)
	}
	if err := checkAuthURL(c.Auth.IdentityEndpoint); err != nil {
		return Credentials{}, fmt.Errorf("%s: %v", r.at("OS_AUTH_URL"), err)
	}
	var err error
	if c.TLS, err = readTLS(r); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

// defaultDomain is the user's or project's domain when none is given:
// OS_DEFAULT_DOMAIN as an ID (openstackclient's default_domain), else the
// domain keystone-manage bootstrap makes, by name.
func defaultDomain(def string) (id, name string) {
	if def != "" {
		return def, ""
	}
	return "", "Default"
}

// readScope is the token's scope: system, project (ID, or name in a
// domain), or domain; two kinds at once are refused, since a token has one.
func readScope(r *credReader, defDomain string) (*gophercloud.AuthScope, error) {
	var kinds []string
	var s gophercloud.AuthScope
	if sys := r.get("OS_SYSTEM_SCOPE"); sys != "" {
		if sys != "all" {
			return nil, fmt.Errorf("%s: %q: Keystone's only system scope is \"all\"", r.at("OS_SYSTEM_SCOPE"), sys)
		}
		s.System = true
		kinds = append(kinds, r.at("OS_SYSTEM_SCOPE"))
	}
	if id := r.get("OS_PROJECT_ID", "OS_TENANT_ID"); id != "" {
		s.ProjectID = id
		kinds = append(kinds, "OS_PROJECT_ID")
	} else if name := r.get("OS_PROJECT_NAME", "OS_TENANT_NAME"); name != "" {
		s.ProjectName = name
		s.DomainID = r.get("OS_PROJECT_DOMAIN_ID")
		s.DomainName = r.get("OS_PROJECT_DOMAIN_NAME")
		if s.DomainID == "" && s.DomainName == "" {
			s.DomainID, s.DomainName = defaultDomain(defDomain)
		}
		kinds = append(kinds, r.at("OS_PROJECT_NAME"))
	}
	if len(kinds) == 0 {
		if id := r.get("OS_DOMAIN_ID"); id != "" {
			s.DomainID = id
			kinds = append(kinds, "OS_DOMAIN_ID")
		} else if name := r.get("OS_DOMAIN_NAME"); name != "" {
			s.DomainName = name
			kinds = append(kinds, "OS_DOMAIN_NAME")
		}
	}
	switch len(kinds) {
	case 0:
		return nil, nil
	case 1:
		return &s, nil
	}
	return nil, fmt.Errorf("%s and %s are both set: a token has one scope; for the catalog, which Keystone's policies make a system matter, keep OS_SYSTEM_SCOPE=all and drop the project", kinds[0], kinds[1])
}

// readTLS reads OS_CACERT (a path, or the PEM itself as a Secret may hold
// it), OS_CERT and OS_KEY (client certificate), and OS_INSECURE (off unless
// "true": verification is never skipped by accident).
func readTLS(r *credReader) (*tls.Config, error) {
	ca, cert, key, insecure := r.get("OS_CACERT"), r.get("OS_CERT"), r.get("OS_KEY"), r.get("OS_INSECURE")
	if r.err != nil {
		return nil, r.err
	}
	if ca == "" && cert == "" && key == "" && insecure == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if insecure != "" {
		b, err := strconv.ParseBool(insecure)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not true or false", r.at("OS_INSECURE"), insecure)
		}
		cfg.InsecureSkipVerify = b
	}
	if ca != "" {
		where := r.at("OS_CACERT")
		if strings.HasPrefix(ca, "-----BEGIN") { // the PEM itself, as a Secret may hold it
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM([]byte(ca)) {
				return nil, fmt.Errorf("%s: no PEM certificate in it", where)
			}
		} else {
			pool, err := certs.Pool(ca)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			cfg.RootCAs = pool
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%s: OS_CERT and OS_KEY go together (a client certificate and its key)", r.src.describe())
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %v", r.at("OS_CERT"), r.at("OS_KEY"), err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// fromClouds reads the cloud named by OS_CLOUD from clouds.yaml (and
// secure.yaml beside it): in dir when the Secret holds it, else where
// openstackclient looks (OS_CLIENT_CONFIG_FILE, ./, ~/.config/openstack,
// /etc/openstack). OS_REGION_NAME and OS_INTERFACE given beside it win.
func fromClouds(r *credReader, cloud, dir, region, iface string) (Credentials, error) {
	var locations []string
	if dir != "" {
		locations = []string{filepath.Join(dir, "clouds.yaml")}
	} else if f := r.get("OS_CLIENT_CONFIG_FILE"); f != "" {
		locations = []string{f}
	} else {
		home, _ := os.UserHomeDir()
		cwd, _ := os.Getwd()
		locations = []string{filepath.Join(cwd, "clouds.yaml"), filepath.Join(home, ".config", "openstack", "clouds.yaml"), "/etc/openstack/clouds.yaml"}
	}
	found := slices.IndexFunc(locations, func(p string) bool { _, err := os.Stat(p); return err == nil })
	if found < 0 {
		return Credentials{}, fmt.Errorf("%s: OS_CLOUD=%s, but there is no clouds.yaml (looked at %s)", r.src.describe(), cloud, strings.Join(locations, ", "))
	}
	file := locations[found]
	// Every option is passed, so clouds.Parse reads nothing from this
	// process' environment that the source did not say.
	auth, eo, tlsCfg, err := clouds.Parse(
		clouds.WithCloudName(cloud),
		clouds.WithLocations(file),
		clouds.WithRegion(region),
		clouds.WithEndpointType(iface),
	)
	if err != nil {
		return Credentials{}, fmt.Errorf("%s: cloud %s: %v", file, cloud, err)
	}
	if auth.IdentityEndpoint == "" {
		return Credentials{}, fmt.Errorf("%s: cloud %s: no auth.auth_url", file, cloud)
	}
	if err := checkAuthURL(auth.IdentityEndpoint); err != nil {
		return Credentials{}, fmt.Errorf("%s: cloud %s: auth.auth_url: %v", file, cloud, err)
	}
	if auth.Scope != nil && auth.Scope.System {
		// clouds.Parse also fills the legacy tenant fields, which gophercloud
		// would turn into a second scope.
		auth.TenantID, auth.TenantName = "", ""
	}
	c := Credentials{Auth: auth, Region: eo.Region, TLS: tlsCfg, From: file + " cloud " + cloud}
	if iface != "" || eo.Availability != gophercloud.AvailabilityPublic {
		c.Interface = normInterface(string(eo.Availability))
	}
	return c, nil
}

// normInterface accepts openstackclient's spellings: public, publicURL, ...
func normInterface(s string) string {
	return strings.TrimSuffix(strings.ToLower(s), "url")
}

// checkAuthURL shows s redacted: a URL that is not Keystone's may carry
// credentials (pasted from a transport URL).
func checkAuthURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not an http or https URL", redact.URL(s))
	}
	return nil
}
