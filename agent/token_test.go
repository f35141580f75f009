package agent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The token's directory is closed (0700) when the agent is root and a
// token is mounted; a symlink put in its place is not followed, and a
// container without a token is left alone.
func TestCloseToken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent closes the directory only as root (CI runs as root)")
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string)
		mode  os.FileMode // of var/run/secrets/kubernetes.io after
		warn  bool
	}{
		{"a mounted token", func(t *testing.T, root string) {
			write(t, filepath.Join(root, tokenDir, "token"), "tok")
		}, 0o700, false},
		{"no token", func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, tokenDir), 0o755)
		}, 0o755, false},
		{"a symlink in the directory's place", func(t *testing.T, root string) {
			elsewhere := filepath.Join(root, "elsewhere")
			write(t, filepath.Join(elsewhere, "serviceaccount", "token"), "tok")
			os.Chmod(elsewhere, 0o755)
			os.MkdirAll(filepath.Join(root, "var/run/secrets"), 0o755)
			if err := os.Symlink(elsewhere, filepath.Join(root, filepath.Dir(tokenDir))); err != nil {
				t.Fatal(err)
			}
		}, 0o755, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(t, root)
			dir := filepath.Join(root, filepath.Dir(tokenDir))
			if tc.mode == 0o755 {
				os.Chmod(dir, 0o755)
			}
			var out bytes.Buffer
			a := New(Options{Root: root, LookupEnv: lookup(nil), Logger: slog.New(slog.NewTextHandler(&out, nil))})
			a.closeToken()
			fi, err := os.Stat(dir) // through the symlink: its target is untouched
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.mode {
				t.Errorf("%s is %v, want %v", dir, fi.Mode().Perm(), tc.mode)
			}
			if warned := strings.Contains(out.String(), "stays readable"); warned != tc.warn {
				t.Errorf("warned %v, want %v:\n%s", warned, tc.warn, out.String())
			}
		})
	}
}
