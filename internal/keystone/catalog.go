package keystone

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
)

// Token asks the Keystone at base for a token of user (password, in the
// Default domain) with scope, the JSON of auth.scope, and returns it with
// the user's ID and, for a project scope, the project's.
func Token(hc *http.Client, base, user, password, scope string) (token, userID, projectID string, err error) {
	auth := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":%q,"password":%q,"domain":{"name":"Default"}}}},"scope":%s}}`,
		user, password, scope)
	resp, err := hc.Post(base+"/v3/auth/tokens", "application/json", bytes.NewReader([]byte(auth)))
	if err != nil {
		return "", "", "", err
	}
	defer resp.Body.Close()
	var body struct {
		Token struct {
			User    struct{ ID string } `json:"user"`
			Project struct{ ID string } `json:"project"`
		} `json:"token"`
	}
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return "", "", "", fmt.Errorf("POST %s/v3/auth/tokens: %s: %s", base, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", "", "", err
	}
	return resp.Header.Get("X-Subject-Token"), body.Token.User.ID, body.Token.Project.ID, nil
}

// Endpoints lists the catalog's endpoints of the service named name, read
// with token, as "interface URL region", sorted.
func Endpoints(hc *http.Client, base, token, name string) ([]string, error) {
	get := func(path string, out any) error {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Auth-Token", token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	var svcs struct {
		Services []struct{ ID, Name string } `json:"services"`
	}
	if err := get("/v3/services", &svcs); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range svcs.Services {
		if s.Name != name {
			continue
		}
		var eps struct {
			Endpoints []struct {
				Interface, URL string
				Region         string `json:"region_id"`
			} `json:"endpoints"`
		}
		if err := get("/v3/endpoints?service_id="+s.ID, &eps); err != nil {
			return nil, err
		}
		for _, e := range eps.Endpoints {
			out = append(out, e.Interface+" "+e.URL+" "+e.Region)
		}
	}
	slices.Sort(out)
	return out, nil
}
