package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// kollaRoot lays out what a kolla-kubernetes pod sees: the ConfigMap at
// /var/lib/kolla/config_files (config.json and the service's files) and the
// image's users, all under a --root directory.
func kollaRoot(t *testing.T, configJSON string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	write := func(p, s string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/passwd", "root:x:0:0:root:/root:/bin/bash\nkeystone:x:42425:42425::/var/lib/keystone:/usr/sbin/nologin\n")
	write("etc/group", "root:x:0:\nkeystone:x:42425:\nkolla:x:42400:keystone\n")
	write("var/lib/kolla/config_files/config.json", configJSON)
	for p, s := range files {
		write(filepath.Join("var/lib/kolla/config_files", p), s)
	}
	return root
}

func plainEnv(kv ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH")}, kv...)
}

// kolla mode: config.json in the kolla config dir, no --config. The files
// are copied with their owner and mode, then config.json's command runs (its
// quoted argument kept whole, which kolla's word splitting breaks).
func TestRunKollaMode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	root := kollaRoot(t, `{
  "command": "sh -c 'echo keystone started > `+out+`'",
  "config_files": [
    {"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/keystone/keystone.conf", "owner": "keystone", "perm": "0600"}
  ]
}`, map[string]string{"keystone.conf": "[DEFAULT]\ndebug = False\n"})
	a := startAgent(t, plainEnv("KOLLA_CONFIG_STRATEGY=COPY_ALWAYS"), "--root", root, "run")
	a.wantExit(0)
	dest := filepath.Join(root, "etc/keystone/keystone.conf")
	b, err := os.ReadFile(dest)
	if err != nil || string(b) != "[DEFAULT]\ndebug = False\n" {
		t.Fatalf("rendered file: %q, %v", b, err)
	}
	fi, _ := os.Stat(dest)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o600 || st.Uid != 42425 || st.Gid != 42425 {
		t.Errorf("mode %v owner %d:%d, want 0600 42425:42425", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	if got, _ := os.ReadFile(out); string(got) != "keystone started\n" {
		t.Errorf("command output %q", got)
	}

	// render --check agrees with the disk; after a change it lists it, exit 1.
	c := startAgent(t, plainEnv(), "--root", root, "render", "--check")
	c.wantExit(0)
	os.WriteFile(dest, []byte("tampered\n"), 0o600)
	c = startAgent(t, plainEnv(), "--root", root, "render", "--check")
	c.wantExit(1)
	if !strings.Contains(c.out.String(), "/etc/keystone/keystone.conf") {
		t.Errorf("check does not name the file:\n%s", c.out.String())
	}
}

// kolla mode with the agent's own templates (agent.yaml at its default
// path): a template's destination may be a directory only config.json
// creates (/etc/keystone in a fresh container), so the start applies
// kolla's plan before it renders the templates.
func TestRunKollaModeWithTemplates(t *testing.T) {
	root := kollaRoot(t, `{
  "command": "true",
  "config_files": [
    {"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/keystone/keystone.conf", "owner": "keystone", "perm": "0600"}
  ]
}`, map[string]string{"keystone.conf": "[DEFAULT]\n", "my_ip.conf.tmpl": "[DEFAULT]\nmy_ip = {{ env \"POD_IP\" }}\n"})
	cfg := filepath.Join(root, "etc/kolla-agent/agent.yaml")
	os.MkdirAll(filepath.Dir(cfg), 0o755)
	os.WriteFile(cfg, []byte("render:\n  - {src: /var/lib/kolla/config_files/my_ip.conf.tmpl, dest: /etc/keystone/my_ip.conf}\n"), 0o644)
	a := startAgent(t, plainEnv("KOLLA_CONFIG_STRATEGY=COPY_ALWAYS", "POD_IP=10.0.0.7"), "--root", root, "run")
	a.wantExit(0)
	if b, err := os.ReadFile(filepath.Join(root, "etc/keystone/my_ip.conf")); err != nil || string(b) != "[DEFAULT]\nmy_ip = 10.0.0.7\n" {
		t.Errorf("template: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/keystone/keystone.conf")); err != nil {
		t.Error(err)
	}
}

// A bad config.json is exit 1 naming the entry and field, and nothing on
// disk changes.
func TestRunKollaBadConfig(t *testing.T) {
	root := kollaRoot(t, `{"command": "true", "config_files": [
  {"source": "/var/lib/kolla/config_files/a.conf", "dest": "/etc/a.conf", "owner": "keystone", "perm": "0600"},
  {"source": "/var/lib/kolla/config_files/b.conf", "dest": "/etc/b.conf", "owner": "nosuchuser", "perm": "0600"}
]}`, map[string]string{"a.conf": "a", "b.conf": "b"})
	a := startAgent(t, plainEnv(), "--root", root, "run")
	a.wantExit(1)
	if !strings.Contains(a.out.String(), "config_files[1].owner") {
		t.Errorf("error does not name the entry and field:\n%s", a.out.String())
	}
	if _, err := os.Stat(filepath.Join(root, "etc/a.conf")); err == nil {
		t.Error("the valid entry was copied although another was bad: not all-or-nothing")
	}
}

func agentYAML(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The child's exit code, or 128+N when signal N killed it; both when the
// agent execs the service and when it supervises it.
func TestRunExitCodes(t *testing.T) {
	for _, mode := range []string{"never", "always"} {
		cfg := agentYAML(t, "run:\n  supervise: "+mode+"\n  grace: 5s\n")
		for _, tc := range []struct {
			cmd  string
			want int
		}{
			{"exit 0", 0},
			{"exit 3", 3},
			{"kill -TERM $$", 143},
			{"kill -KILL $$", 137},
		} {
			t.Run(mode+"/"+tc.cmd, func(t *testing.T) {
				a := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sh", "-c", tc.cmd)
				a.wantExit(tc.want)
			})
		}
	}
}

// KOLLA_BOOTSTRAP present (empty counts): the bootstrap command runs instead
// of the service, and its exit code is the agent's.
func TestRunBootstrap(t *testing.T) {
	dir := t.TempDir()
	cfg := agentYAML(t, "run:\n  command: sh -c 'echo service > "+dir+"/service'\n  bootstrap: sh -c 'echo db_sync > "+dir+"/bootstrap; exit 4'\n")
	a := startAgent(t, plainEnv("KOLLA_BOOTSTRAP="), "--config", cfg, "run")
	a.wantExit(4)
	if b, _ := os.ReadFile(filepath.Join(dir, "bootstrap")); string(b) != "db_sync\n" {
		t.Errorf("bootstrap did not run: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "service")); err == nil {
		t.Error("the service ran in bootstrap mode")
	}
	b := startAgent(t, plainEnv(), "--config", cfg, "run")
	b.wantExit(0)
	if s, _ := os.ReadFile(filepath.Join(dir, "service")); string(s) != "service\n" {
		t.Errorf("without KOLLA_BOOTSTRAP the service did not run: %q", s)
	}

	// KOLLA_UPGRADE runs run.upgrade; without one configured, the service runs.
	up := agentYAML(t, "run:\n  command: sh -c 'echo service2 > "+dir+"/service2'\n  upgrade: sh -c 'echo expand > "+dir+"/upgrade'\n")
	startAgent(t, plainEnv("KOLLA_UPGRADE=1"), "--config", up, "run").wantExit(0)
	if u, _ := os.ReadFile(filepath.Join(dir, "upgrade")); string(u) != "expand\n" {
		t.Errorf("KOLLA_UPGRADE did not run run.upgrade: %q", u)
	}
	if _, err := os.Stat(filepath.Join(dir, "service2")); err == nil {
		t.Error("the service ran in upgrade mode")
	}
	noUp := agentYAML(t, "run:\n  command: sh -c 'echo service3 > "+dir+"/service3'\n")
	startAgent(t, plainEnv("KOLLA_UPGRADE="), "--config", noUp, "run").wantExit(0)
	if s, _ := os.ReadFile(filepath.Join(dir, "service3")); string(s) != "service3\n" {
		t.Errorf("with KOLLA_UPGRADE but no run.upgrade the service did not run: %q", s)
	}
}

// Supervised: SIGTERM to the agent reaches the service's process group; the
// service's own exit code comes back.
func TestRunForwardsSIGTERM(t *testing.T) {
	dir := t.TempDir()
	cfg := agentYAML(t, "run:\n  supervise: always\n  grace: 10s\n")
	script := "trap 'echo got TERM > " + dir + "/sig; exit 7' TERM; echo ready > " + dir + "/ready; while :; do sleep 0.05; done"
	a := startAgent(t, plainEnv(), "--config", cfg, "run", "--", "sh", "-c", script)
	eventually(t, "service ready", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(7)
	if b, _ := os.ReadFile(filepath.Join(dir, "sig")); string(b) != "got TERM\n" {
		t.Errorf("the service did not get SIGTERM: %q", b)
	}
}

// Templates with values from the real cluster DNS: a headless service's
// ready endpoints (rabbitmq transport_url, galera gcomm://) and the pod's IP.
func TestRenderTemplatesFromClusterDNS(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "rabbitmq", true, map[string]string{"app": "rabbitmq"})
	for i, ip := range []string{"10.30.0.3", "10.30.0.1", "10.30.0.2"} {
		name := "rabbitmq-" + string(rune('0'+i))
		mkPod(t, ns, name, map[string]string{"app": "rabbitmq"})
		setReady(t, ns, name, ip, true)
	}
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "nova.conf.tmpl")
	os.WriteFile(tmpl, []byte(`[DEFAULT]
my_ip = {{ podIP }}
transport_url = rabbit://{{ range $i, $a := endpoints "rabbitmq.`+ns+`" }}{{ if $i }},{{ end }}nova:secret@{{ $a }}:5672{{ end }}//
[galera]
wsrep_cluster_address = gcomm://{{ endpoints "rabbitmq.`+ns+`" | join "," }}
`), 0o644)
	dest := filepath.Join(dir, "nova.conf")
	cfg := agentYAML(t, "render:\n  - {src: "+tmpl+", dest: "+dest+", perm: \"0640\"}\nrenderOptions: {timeout: 30s}\n")
	a := startAgent(t, append(agentEnv(t, ns), "POD_IP=10.30.1.9"), "--config", cfg, "render")
	a.wantExit(0)
	got, _ := os.ReadFile(dest)
	want := `[DEFAULT]
my_ip = 10.30.1.9
transport_url = rabbit://nova:secret@10.30.0.1:5672,nova:secret@10.30.0.2:5672,nova:secret@10.30.0.3:5672//
[galera]
wsrep_cluster_address = gcomm://10.30.0.1,10.30.0.2,10.30.0.3
`
	if string(got) != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if fi, _ := os.Stat(dest); fi == nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode of %s: %v", dest, fi)
	}
}

// A template error is exit 1 naming file:line:col, and nothing is written.
func TestRenderTemplateStrictErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tmpl")
	bad := filepath.Join(dir, "bad.tmpl")
	os.WriteFile(good, []byte("ok\n"), 0o644)
	os.WriteFile(bad, []byte("line one\nvalue = {{ .missing.key }}\n"), 0o644)
	cfg := agentYAML(t, "render:\n  - {src: "+good+", dest: "+dir+"/good.conf}\n  - {src: "+bad+", dest: "+dir+"/bad.conf}\n")
	a := startAgent(t, plainEnv(), "--config", cfg, "render")
	a.wantExit(1)
	if !strings.Contains(a.out.String(), bad+":2:") {
		t.Errorf("error does not name %s:2:COL:\n%s", bad, a.out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "good.conf")); err == nil {
		t.Error("good.conf was written although bad.tmpl failed: not all-or-nothing")
	}
}

// COPY_ONCE: the first start copies, later starts keep what is there (and
// still run the service).
func TestRunCopyOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "runs")
	root := kollaRoot(t, `{"command": "sh -c 'echo run >> `+out+`'", "config_files": [
  {"source": "/var/lib/kolla/config_files/a.conf", "dest": "/etc/a.conf", "owner": "root", "perm": "0644"}]}`,
		map[string]string{"a.conf": "v1\n"})
	env := plainEnv("KOLLA_CONFIG_STRATEGY=COPY_ONCE")
	startAgent(t, env, "--root", root, "run").wantExit(0)
	os.WriteFile(filepath.Join(root, "var/lib/kolla/config_files/a.conf"), []byte("v2\n"), 0o644)
	b := startAgent(t, env, "--root", root, "run")
	b.wantExit(0)
	if got, _ := os.ReadFile(filepath.Join(root, "etc/a.conf")); string(got) != "v1\n" {
		t.Errorf("COPY_ONCE copied again: %q", got)
	}
	if runs, _ := os.ReadFile(out); string(runs) != "run\nrun\n" {
		t.Errorf("the service ran %q, want twice", runs)
	}
	bad := startAgent(t, plainEnv("KOLLA_CONFIG_STRATEGY=COPY_SOMETIMES"), "--root", root, "run")
	bad.wantExit(1)
}

// The service runs as run.user/run.group with the image's supplementary
// groups, whether the agent execs it or supervises it.
func TestRunAsUser(t *testing.T) {
	root := kollaRoot(t, `{"command": "true"}`, nil)
	for _, mode := range []string{"never", "always"} {
		t.Run(mode, func(t *testing.T) {
			// t.TempDir's parents are 0700: the service user could not reach it.
			dir, err := os.MkdirTemp("", "run-as-user-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			os.Chmod(dir, 0o777)
			out := filepath.Join(dir, "id")
			// --config, like every config path, is read under --root.
			os.WriteFile(filepath.Join(root, "agent-"+mode+".yaml"), []byte("run:\n  user: keystone\n  supervise: "+mode+"\n"), 0o644)
			a := startAgent(t, plainEnv(), "--root", root, "--config", "/agent-"+mode+".yaml", "run", "--", "sh", "-c", "echo $(id -u) $(id -g) $(id -G) $HOME > "+out)
			a.wantExit(0)
			got, _ := os.ReadFile(out)
			if string(got) != "42425 42425 42425 42400 /var/lib/keystone\n" {
				t.Errorf("id: %q", got)
			}
		})
	}
}

// As the real PID 1 of a PID namespace (what a container gives it), `run`
// with supervise: auto stays as the service's parent and reaps the orphans
// the service leaves behind: 200 of them here, none left as zombies.
func TestRunAsPID1ReapsOrphans(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to make a PID namespace: %v", err)
	}
	dir, err := os.MkdirTemp("", "pid1-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := agentYAML(t, "run:\n  supervise: auto\n  grace: 5s\n")
	// Each orphan's parent subshell exits at once, so the sleeper is
	// re-parented to PID 1. Then count zombies in the namespace.
	script := `echo $$ > ` + dir + `/svcpid
for i in $(seq 200); do (sleep 0.05 &); done
sleep 1
zombies=0
for f in /proc/[0-9]*/stat; do
  set -- $(cat $f 2>/dev/null); [ "$3" = Z ] && zombies=$((zombies+1))
done
echo $zombies > ` + dir + `/zombies
exit 5`
	c := startAgentCmd(t, exec.Command(unshare, "--pid", "--fork", "--mount-proc", s.bin, "--config", cfg, "run", "--", "sh", "-c", script), plainEnv())
	c.wantExit(5)
	if got, _ := os.ReadFile(filepath.Join(dir, "zombies")); strings.TrimSpace(string(got)) != "0" {
		t.Errorf("zombies left in the namespace: %q\n%s", got, c.out.String())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "svcpid")); strings.TrimSpace(string(got)) == "1" {
		t.Errorf("the service was PID 1: the agent exec'd it instead of supervising")
	}
}
