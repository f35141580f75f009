package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The Keystone catalog is kept by hand-written calls of Keystone's v3 API:
// a password token, then services, regions and endpoints. gophercloud's
// identity v3 does the same in 0.6 MB of binary (measured), which the
// agent's 20 MB budget does not have; these are the six calls it needs.

// Credentials are a Keystone user's, read from a mounted Secret whose keys
// are the usual OS_* names (openstack-helm's keystone-admin Secret).
type Credentials struct {
	AuthURL, Username, Password, ProjectName, UserDomain, ProjectDomain string
}

// ReadCredentials reads OS_AUTH_URL, OS_USERNAME, OS_PASSWORD,
// OS_PROJECT_NAME, OS_USER_DOMAIN_NAME and OS_PROJECT_DOMAIN_NAME (the
// domains default to "Default") from the files of dir. Errors name the file.
func ReadCredentials(dir string) (Credentials, error) {
	read := func(key string, required bool, def string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, key))
		if os.IsNotExist(err) && !required {
			return def, nil
		}
		if err != nil {
			return "", err
		}
		v := strings.TrimSpace(string(b))
		if v == "" && required {
			return "", fmt.Errorf("%s: empty", filepath.Join(dir, key))
		}
		return v, nil
	}
	var c Credentials
	var err error
	for _, f := range []struct {
		key      string
		to       *string
		required bool
		def      string
	}{
		{"OS_AUTH_URL", &c.AuthURL, true, ""},
		{"OS_USERNAME", &c.Username, true, ""},
		{"OS_PASSWORD", &c.Password, true, ""},
		{"OS_PROJECT_NAME", &c.ProjectName, true, ""},
		{"OS_USER_DOMAIN_NAME", &c.UserDomain, false, "Default"},
		{"OS_PROJECT_DOMAIN_NAME", &c.ProjectDomain, false, "Default"},
	} {
		if *f.to, err = read(f.key, f.required, f.def); err != nil {
			return Credentials{}, err
		}
	}
	if u, err := url.Parse(c.AuthURL); err != nil || u.Host == "" {
		return Credentials{}, fmt.Errorf("%s: %q is not a URL", filepath.Join(dir, "OS_AUTH_URL"), c.AuthURL)
	}
	return c, nil
}

// keystone is an authenticated v3 client.
type keystone struct {
	base  string // .../v3
	token string
	http  *http.Client
}

func newKeystone(ctx context.Context, c Credentials) (*keystone, error) {
	base := strings.TrimSuffix(c.AuthURL, "/")
	if !strings.HasSuffix(base, "/v3") {
		base += "/v3"
	}
	k := &keystone{base: base, http: &http.Client{Timeout: 30 * time.Second}}
	body := map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": map[string]any{
			"name": c.Username, "password": c.Password, "domain": map[string]any{"name": c.UserDomain},
		}}},
		"scope": map[string]any{"project": map[string]any{"name": c.ProjectName, "domain": map[string]any{"name": c.ProjectDomain}}},
	}}
	resp, err := k.do(ctx, http.MethodPost, "/auth/tokens", body, nil)
	if err != nil {
		return nil, fmt.Errorf("keystone %s: authenticating as %s: %w", base, c.Username, err)
	}
	if k.token = resp.Header.Get("X-Subject-Token"); k.token == "" {
		return nil, fmt.Errorf("keystone %s: no token in the answer", base)
	}
	return k, nil
}

// do sends one request and decodes the answer into out (when not nil).
func (k *keystone) do(ctx context.Context, method, path string, in, out any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if k.token != "" {
		req.Header.Set("X-Auth-Token", k.token)
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return resp, &keystoneError{Method: method, Path: path, Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp, fmt.Errorf("%s %s: %v", method, path, err)
		}
	}
	return resp, nil
}

type keystoneError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *keystoneError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, truncate(e.Body, 300))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

type ksService struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Name string `json:"name"`
}

type ksEndpoint struct {
	ID        string `json:"id"`
	Interface string `json:"interface"`
	URL       string `json:"url"`
	RegionID  string `json:"region_id,omitempty"`
	ServiceID string `json:"service_id"`
}

// Registration is what the catalog must say for one service.
type Registration struct {
	Type, Name, Description string
	Region                  string            // "" for none
	URLs                    map[string]string // interface (public, internal, admin) -> URL
}

// Change is one write Register made (or would make, in a dry run).
type Change struct {
	What, Before, After string
}

func (c Change) String() string {
	if c.Before == "" {
		return fmt.Sprintf("create %s: %s", c.What, c.After)
	}
	return fmt.Sprintf("update %s: %s -> %s", c.What, c.Before, c.After)
}

// Register makes the catalog say r: the service (by type and name), the
// region, and one endpoint per interface with its URL, created or updated,
// never duplicated. It returns what it changed; a second run returns
// nothing. dryRun reads and changes nothing.
func Register(ctx context.Context, cred Credentials, r Registration, dryRun bool) ([]Change, error) {
	k, err := newKeystone(ctx, cred)
	if err != nil {
		return nil, err
	}
	var changes []Change
	var svcs struct {
		Services []ksService `json:"services"`
	}
	if _, err := k.do(ctx, http.MethodGet, "/services?type="+url.QueryEscape(r.Type), nil, &svcs); err != nil {
		return nil, err
	}
	var svc *ksService
	for i, s := range svcs.Services {
		if s.Name == r.Name {
			svc = &svcs.Services[i]
		}
	}
	if svc == nil {
		changes = append(changes, Change{What: "service " + r.Name + " (" + r.Type + ")", After: r.Name})
		if dryRun {
			svc = &ksService{}
		} else {
			var created struct {
				Service ksService `json:"service"`
			}
			if _, err := k.do(ctx, http.MethodPost, "/services", map[string]any{"service": map[string]any{
				"type": r.Type, "name": r.Name, "description": r.Description, "enabled": true,
			}}, &created); err != nil {
				return changes, err
			}
			svc = &created.Service
		}
	}
	if r.Region != "" {
		var regions struct {
			Regions []struct {
				ID string `json:"id"`
			} `json:"regions"`
		}
		if _, err := k.do(ctx, http.MethodGet, "/regions", nil, &regions); err != nil {
			return changes, err
		}
		found := false
		for _, rg := range regions.Regions {
			found = found || rg.ID == r.Region
		}
		if !found {
			changes = append(changes, Change{What: "region", After: r.Region})
			if !dryRun {
				if _, err := k.do(ctx, http.MethodPost, "/regions", map[string]any{"region": map[string]any{"id": r.Region}}, nil); err != nil {
					return changes, err
				}
			}
		}
	}
	var eps struct {
		Endpoints []ksEndpoint `json:"endpoints"`
	}
	if svc.ID != "" {
		if _, err := k.do(ctx, http.MethodGet, "/endpoints?service_id="+url.QueryEscape(svc.ID), nil, &eps); err != nil {
			return changes, err
		}
	}
	for _, iface := range []string{"public", "internal", "admin"} {
		want, ok := r.URLs[iface]
		if !ok {
			continue
		}
		what := fmt.Sprintf("%s endpoint of %s", iface, r.Name)
		var have *ksEndpoint
		for i, e := range eps.Endpoints {
			if e.Interface == iface && (r.Region == "" || e.RegionID == r.Region) {
				have = &eps.Endpoints[i]
				break // the first: a duplicate someone else made is left alone
			}
		}
		switch {
		case have == nil:
			changes = append(changes, Change{What: what, After: want})
			if dryRun {
				continue
			}
			ep := map[string]any{"service_id": svc.ID, "interface": iface, "url": want, "enabled": true}
			if r.Region != "" {
				ep["region_id"] = r.Region
			}
			if _, err := k.do(ctx, http.MethodPost, "/endpoints", map[string]any{"endpoint": ep}, nil); err != nil {
				return changes, err
			}
		case have.URL != want:
			changes = append(changes, Change{What: what, Before: have.URL, After: want})
			if dryRun {
				continue
			}
			if _, err := k.do(ctx, http.MethodPatch, "/endpoints/"+url.PathEscape(have.ID), map[string]any{"endpoint": map[string]any{"url": want}}, nil); err != nil {
				return changes, err
			}
		}
	}
	return changes, nil
}
