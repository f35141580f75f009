package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// keystoneHook behaves as kolla's keystone extend_start.sh does, in a
// directory of the test: it makes the log directory keystone:kolla, runs
// db_sync and exits on KOLLA_BOOTSTRAP (set, even empty), expand and
// migrate on KOLLA_UPGRADE, and otherwise exports the service's
// environment and sets ARGS. @DIR@ is replaced by the test's directory.
const keystoneHook = `# a kolla-style start hook, sourced by start.sh (errexit, pipefail)
LOG_DIR=@DIR@/log/keystone
if [[ ! -d "${LOG_DIR}" ]]; then
    mkdir -p "${LOG_DIR}"
fi
if [[ $(id -u) -eq 0 ]]; then
    chown 42425:42400 "${LOG_DIR}"
fi
chmod 755 "${LOG_DIR}"
echo "hook sees CMD=${CMD}" > @DIR@/hook-cmd
if [[ "${!KOLLA_UPGRADE[@]}" ]]; then
    echo "db_sync --expand" >> @DIR@/db_sync
    false   # errexit: a failed step ends the container with its code
    echo "db_sync --migrate" >> @DIR@/db_sync
    exit 0
fi
if [[ "${!KOLLA_BOOTSTRAP[@]}" ]]; then
    echo "db_sync" >> @DIR@/db_sync
    exit 0
fi
export APACHE_RUN_DIR=@DIR@/run
unset DROPPED
ARGS="-DFOREGROUND -X"
`

// kolla mode runs what kolla's start.sh runs between kolla_set_configs and
// the exec: /run_command, the custom CA certificates and the image's
// kolla_extend_start, whose exit is the container's and whose ARGS and
// environment reach the service.
func TestRunKollaStartHook(t *testing.T) {
	dir, err := os.MkdirTemp("", "kolla-hook-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	writeExec := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// kolla installs the hook 0644: bash's "." needs no execute bit.
	writeHook := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, "kolla_extend_start"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeHook(strings.ReplaceAll(keystoneHook, "@DIR@", dir))
	out := filepath.Join(dir, "service")
	command := `sh -c 'echo "$0 $1 APACHE_RUN_DIR=$APACHE_RUN_DIR DROPPED=$DROPPED" > ` + out + `'`
	root := kollaRoot(t, `{"command": "`+strings.ReplaceAll(command, `"`, `\"`)+`"}`, nil)
	env := func(kv ...string) []string {
		return append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "KOLLA_CONFIG_STRATEGY=COPY_ALWAYS", "DROPPED=yes"}, kv...)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	reset := func() {
		for _, f := range []string{"service", "db_sync", "hook-cmd", "ca", "log"} {
			os.RemoveAll(filepath.Join(dir, f))
		}
	}

	t.Run("service", func(t *testing.T) {
		reset()
		startAgent(t, env(), "--root", root, "run").wantExit(0)
		if got, want := read("service"), "-DFOREGROUND -X APACHE_RUN_DIR="+dir+"/run DROPPED="; got != want {
			t.Errorf("the service saw %q, want %q (ARGS appended, the hook's environment)", got, want)
		}
		if got := read("hook-cmd"); got != "hook sees CMD="+command {
			t.Errorf("%s", got)
		}
		b, err := os.ReadFile(filepath.Join(root, "run_command"))
		fi, _ := os.Stat(filepath.Join(root, "run_command"))
		if err != nil || string(b) != command || fi.Mode().Perm() != 0o644 {
			t.Errorf("/run_command: %q %v, %v", b, fi.Mode(), err)
		}
		fi, err = os.Stat(filepath.Join(dir, "log/keystone"))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("log dir: %v", err)
		}
		if os.Geteuid() == 0 {
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 42425 || st.Gid != 42400 {
				t.Errorf("log dir owned %d:%d, want keystone:kolla (42425:42400)", st.Uid, st.Gid)
			}
		}
	})
	t.Run("KOLLA_BOOTSTRAP", func(t *testing.T) {
		reset()
		a := startAgent(t, env("KOLLA_BOOTSTRAP="), "--root", root, "run")
		a.wantExit(0)
		if read("db_sync") != "db_sync" || read("service") != "" {
			t.Errorf("db_sync %q, service %q: want the hook's db_sync and no service", read("db_sync"), read("service"))
		}
	})
	t.Run("failing step", func(t *testing.T) {
		reset()
		a := startAgent(t, env("KOLLA_UPGRADE="), "--root", root, "run")
		a.wantExit(1)
		if read("db_sync") != "db_sync --expand" || read("service") != "" {
			t.Errorf("db_sync %q, service %q: want errexit after expand", read("db_sync"), read("service"))
		}
	})
	t.Run("nounset", func(t *testing.T) {
		// start.sh's nounset: a hook that reads an unset variable ends
		// the container, as under kolla_start; the trace shows where.
		reset()
		writeHook("echo \"${NOT_SET_ANYWHERE}\" > " + dir + "/service\n")
		t.Cleanup(func() { writeHook(strings.ReplaceAll(keystoneHook, "@DIR@", dir)) })
		a := startAgent(t, env(), "--root", root, "run")
		a.wantExit(1)
		if out := a.out.String(); read("service") != "" || !strings.Contains(out, "NOT_SET_ANYWHERE: unbound variable") || !strings.Contains(out, "+ . ") {
			t.Errorf("service %q, output:\n%s", read("service"), out)
		}
	})
	t.Run("KOLLA_SKIP_EXTEND_START", func(t *testing.T) {
		reset()
		startAgent(t, env("KOLLA_SKIP_EXTEND_START="), "--root", root, "run").wantExit(0)
		if got := read("service"); got != "sh  APACHE_RUN_DIR= DROPPED=yes" || read("hook-cmd") != "" {
			t.Errorf("the service saw %q, hook %q: want no hook", got, read("hook-cmd"))
		}
	})
	t.Run("as run.user, a background process left behind", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("running the hook as another user needs root (CI runs as root)")
		}
		reset()
		os.Chmod(dir, 0o777)
		os.Chmod(bin, 0o755)
		// A hook that leaves a process in the background (which holds
		// the report's pipe) and says who it runs as.
		writeHook("id -u > " + dir + "/hook-uid\n(sleep 300 >/dev/null 2>&1 &)\nARGS=\"-X\"\n")
		t.Cleanup(func() { writeHook(strings.ReplaceAll(keystoneHook, "@DIR@", dir)) })
		// agent.yaml at its default path: kolla mode stays on.
		cfg := filepath.Join(root, "etc/kolla-agent/agent.yaml")
		os.MkdirAll(filepath.Dir(cfg), 0o755)
		os.WriteFile(cfg, []byte("run:\n  user: keystone\n"), 0o644)
		t.Cleanup(func() { os.Remove(cfg) })
		// wantExit fails an agent that hangs on the pipe.
		a := startAgent(t, env(), "--root", root, "run")
		a.wantExit(0)
		if got := read("hook-uid"); got != "42425" {
			t.Errorf("the hook ran as uid %q, want run.user's 42425", got)
		}
		exec.Command("pkill", "-f", "^sleep 300$").Run()
	})
	t.Run("CA certificates", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the trust store is root's: this case needs root (CI runs as root)")
		}
		reset()
		caDir := filepath.Join(root, "var/lib/kolla/share/ca-certificates")
		os.MkdirAll(caDir, 0o755)
		os.WriteFile(filepath.Join(caDir, "root.pem"), []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
		t.Cleanup(func() { os.RemoveAll(caDir) })
		// Without the image's kolla_copy_cacerts: copied into Debian's
		// store, update-ca-certificates run.
		store := filepath.Join(root, "usr/local/share/ca-certificates")
		os.MkdirAll(store, 0o755)
		writeExec("update-ca-certificates", "#!/bin/sh\necho update >> "+dir+"/ca\n")
		startAgent(t, env(), "--root", root, "run").wantExit(0)
		if b, err := os.ReadFile(filepath.Join(store, "kolla-customca-root.crt")); err != nil || !strings.HasPrefix(string(b), "-----BEGIN") {
			t.Errorf("the certificate in the store: %q %v", b, err)
		}
		if read("ca") != "update" {
			t.Errorf("update-ca-certificates: %q", read("ca"))
		}
		// The image's own kolla_copy_cacerts wins; a failing one fails the start.
		reset()
		writeExec("kolla_copy_cacerts", "#!/bin/sh\necho kolla_copy_cacerts >> "+dir+"/ca\n")
		startAgent(t, env(), "--root", root, "run").wantExit(0)
		if read("ca") != "kolla_copy_cacerts" {
			t.Errorf("ran %q, want the image's kolla_copy_cacerts", read("ca"))
		}
		writeExec("kolla_copy_cacerts", "#!/bin/sh\necho no space left >&2\nexit 1\n")
		a := startAgent(t, env(), "--root", root, "run")
		a.wantExit(2) // the agent's code for a start that failed at run time
		if !strings.Contains(a.out.String(), "no space left") || !strings.Contains(a.out.String(), "ca-certificates") {
			t.Errorf("the failure does not say what failed:\n%s", a.out.String())
		}
		os.Remove(filepath.Join(bin, "kolla_copy_cacerts"))
		// kolla_copy_cacerts' other source, config_files/ca-certificates,
		// when the share directory is not there.
		reset()
		os.RemoveAll(caDir)
		os.Remove(filepath.Join(store, "kolla-customca-root.crt"))
		fallback := filepath.Join(root, "var/lib/kolla/config_files/ca-certificates")
		os.MkdirAll(fallback, 0o755)
		os.WriteFile(filepath.Join(fallback, "other.pem"), []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
		t.Cleanup(func() { os.RemoveAll(fallback) })
		startAgent(t, env(), "--root", root, "run").wantExit(0)
		if _, err := os.Stat(filepath.Join(store, "kolla-customca-other.crt")); err != nil || read("ca") != "update" {
			t.Errorf("the config_files certificate: %v, update %q", err, read("ca"))
		}
	})
}
