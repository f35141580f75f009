package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// The real Keystone under uWSGI, supervised by `kolla-agent run`, its
// config rendered from a volume the kubelet's own AtomicWriter updates:
//   - [DEFAULT] debug turned on -> SIGHUP -> keystone's own log has DEBUG
//     lines for the next request;
//   - an option oslo-config-validator does not know, and an INI syntax
//     error, never reach keystone's config dir, and keystone keeps serving;
//   - a config that makes keystone fail readiness is rolled back, and
//     keystone serves again on the last good one.
func TestKeystoneReload(t *testing.T) {
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	kw := atomicwriter.Start(t)
	vol := filepath.Join(t.TempDir(), "config_files") // the ConfigMap volume
	confDir := t.TempDir()                            // keystone's --config-dir
	logFile := filepath.Join(t.TempDir(), "keystone.log")
	live := filepath.Join(confDir, "reload.conf")
	write := func(extra string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"reload.conf.tmpl": "[DEFAULT]\nlog_file = " + logFile + "\n" + extra}); err != nil {
			t.Fatal(err)
		}
	}
	write("debug = false\n")
	ksPort, port := freePort(t), freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
run:
  grace: 30s
render:
  - {src: %[1]s/reload.conf.tmpl, dest: %[2]s}
reload:
  quiet: 200ms
  verifyTimeout: 15s
  stateDir: %[3]s
  validate:
    - dest: %[2]s
      command: /usr/bin/oslo-config-validator --namespace keystone --namespace oslo.log --input-file {{ .Staged }}
probes:
  address: 127.0.0.1:%[4]d
  socket: off
  checks:
    - name: api
      http: {url: "http://127.0.0.1:%[5]d/v3", expectStatus: [200]}
      probes: [startup, readiness]
      period: 500ms
      timeout: 400ms
      failureThreshold: 1
`, vol, live, t.TempDir(), port, ksPort))
	var argv []string
	for _, a := range inst.Command(ksPort) {
		switch {
		case a == "--need-app":
			// Without it a worker that cannot load keystone serves 500s
			// (what verification must catch) instead of ending uWSGI.
		case strings.HasPrefix(a, "--config-dir "):
			argv = append(argv, "--config-dir "+confDir) // keystone reads the rendered file
		default:
			argv = append(argv, a)
		}
	}
	a := startAgent(t, inst.Env(), append([]string{"--config", cfg, "run", "--"}, argv...)...)
	waitStatus(t, base+"/readyz", 200, 90*time.Second)
	eventually(t, "both uWSGI workers loaded", func() bool { return len(workerReady.FindAllString(a.out.String(), -1)) >= 2 })
	debugLines := func() int {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), " DEBUG ")
	}
	if n := debugLines(); n != 0 {
		t.Fatalf("%d DEBUG lines with debug = false", n)
	}

	// debug on: committed, SIGHUP, verified.
	write("debug = true\n")
	a.waitLog("outcome=applied")
	if b, _ := os.ReadFile(live); !strings.Contains(string(b), "debug = true") {
		t.Fatalf("live config after the reload:\n%s", b)
	}
	if !strings.Contains(a.out.String(), "signalling the service") {
		t.Errorf("the service was not signalled:\n%s", a.out.String())
	}
	eventually(t, "DEBUG lines in keystone's own log after a request", func() bool {
		get(fmt.Sprintf("http://127.0.0.1:%d/v3", ksPort))
		return debugLines() > 0
	})

	// Refused before the commit: keystone's config is untouched, it serves.
	for _, bad := range []struct{ extra, why string }{
		{"debug = true\ndebg = true\n", "DEFAULT/debg is not part of the sample config"},
		{"debug = true\nverbose true\n", "reload.conf:4"},
	} {
		// The pass line, not the outcome's own before it: a count read
		// between the two would take the last rejection for this one.
		n := strings.Count(a.out.String(), `msg="reload pass" outcome=rejected`)
		write(bad.extra)
		eventually(t, "the rejection of "+bad.why, func() bool { return strings.Count(a.out.String(), `msg="reload pass" outcome=rejected`) > n })
		if !strings.Contains(a.out.String(), bad.why) {
			t.Errorf("the rejection does not say %q:\n%s", bad.why, a.out.String())
		}
		if b, _ := os.ReadFile(live); string(b) != "[DEFAULT]\nlog_file = "+logFile+"\ndebug = true\n" {
			t.Errorf("a rejected config reached keystone:\n%s", b)
		}
		if code, _ := get(base + "/readyz"); code != 200 {
			t.Errorf("readiness after a rejected config: %d", code)
		}
	}

	// Valid for the validator, fatal for keystone: rolled back.
	write("debug = true\n[token]\nprovider = nosuch\n")
	a.waitLog("outcome=rolled-back")
	if b, _ := os.ReadFile(live); strings.Contains(string(b), "nosuch") {
		t.Errorf("not rolled back:\n%s", b)
	}
	waitStatus(t, base+"/readyz", 200, 60*time.Second)
	if code, _ := get(fmt.Sprintf("http://127.0.0.1:%d/v3", ksPort)); code != 200 {
		t.Errorf("keystone after the rollback: %d", code)
	}
	a.running()
}
