package bootstrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCredentials(t *testing.T) {
	write := func(kv map[string]string) string {
		dir := t.TempDir()
		for k, v := range kv {
			os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600)
		}
		return dir
	}
	full := map[string]string{"OS_AUTH_URL": "http://keystone:5000/v3\n", "OS_USERNAME": "admin", "OS_PASSWORD": "secret\n", "OS_PROJECT_NAME": "admin"}
	c, err := ReadCredentials(write(full))
	if err != nil || c.AuthURL != "http://keystone:5000/v3" || c.Password != "secret" || c.UserDomain != "Default" || c.ProjectDomain != "Default" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, tc := range []struct {
		name string
		drop string
		set  map[string]string
		want string
	}{
		{"no password", "OS_PASSWORD", nil, "OS_PASSWORD: no such file"},
		{"empty user", "", map[string]string{"OS_USERNAME": " \n"}, "OS_USERNAME: empty"},
		{"bad URL", "", map[string]string{"OS_AUTH_URL": "keystone"}, `OS_AUTH_URL: "keystone" is not a URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := map[string]string{}
			for k, v := range full {
				if k != tc.drop {
					kv[k] = v
				}
			}
			for k, v := range tc.set {
				kv[k] = v
			}
			_, err := ReadCredentials(write(kv))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
