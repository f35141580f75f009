package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// A turn is from "holding a turn" to "turn done", which comes before the
// Lease is released ("turn released" can come after the next replica took
// it).
var turnLine = regexp.MustCompile(`time=(\S+) level=INFO msg="reload: (holding a turn|turn done)"`)

// reload.maxUnavailable: 1 over three replicas that restart their service
// on a change (each takes a second to come back and be verified): the
// Lease semaphore lets one act at a time, so no two are unavailable at
// once, and all three end on the new config. The RBAC is
// examples/rbac/reload-lease.yaml.
func TestReloadMaxUnavailable(t *testing.T) {
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/reload-lease.yaml"})
	kw := atomicwriter.Start(t)
	vol := filepath.Join(t.TempDir(), "config_files")
	write := func(v string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"svc.conf": "[DEFAULT]\nv = " + v + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	var agents []*agentProc
	for i := range 3 {
		dir := t.TempDir()
		port := freePort(t)
		cfg := agentYAML(t, fmt.Sprintf(`namespace: %[1]s
render:
  - {src: %[2]s/svc.conf, dest: %[3]s/svc.conf}
reload:
  quiet: 100ms
  action: restart
  maxUnavailable: 1
  leaseName: glance-api
  verifyTimeout: 30s
  stateDir: %[3]s/state
probes:
  address: 127.0.0.1:%[4]d
  socket: off
  checks:
    - name: loaded
      exec: {command: ["cmp", "-s", "%[3]s/svc.conf", "%[3]s/loaded"]}
      probes: [readiness]
      period: 200ms
      timeout: 150ms
      failureThreshold: 1
`, ns, vol, dir, port))
		script := fmt.Sprintf(`sleep 1; cp %[1]s/svc.conf %[1]s/loaded; trap 'exit 0' TERM; while :; do sleep 0.1; done`, dir)
		a := startAgent(t, withEnv(env, fmt.Sprintf("POD_NAME=glance-api-%d", i)), "--config", cfg, "run", "--", "/bin/sh", "-c", script)
		agents = append(agents, a)
		defer waitStatus(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 200, 30*time.Second)
	}
	for _, a := range agents {
		a.waitLog("reload: watching")
	}
	write("2")
	type span struct{ from, to time.Time }
	var spans []span
	for _, a := range agents {
		a.waitLog("outcome=applied")
		a.waitLog("reload: turn released")
		m := turnLine.FindAllStringSubmatch(a.out.String(), -1)
		if len(m) != 2 {
			t.Fatalf("want one turn taken and done:\n%s", a.out.String())
		}
		from, _ := time.Parse(time.RFC3339Nano, m[0][1])
		to, _ := time.Parse(time.RFC3339Nano, m[1][1])
		spans = append(spans, span{from, to})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from.Before(spans[j].from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from.Before(spans[i-1].to) {
			t.Errorf("two replicas acted at once: %v-%v and %v-%v", spans[i-1].from, spans[i-1].to, spans[i].from, spans[i].to)
		}
	}
	t.Logf("turns: %v", spans)
}
