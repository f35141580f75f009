package main

import (
	"strings"
	"testing"
)

// Until the shipper exists, a logs: section is refused, with exit 1 and
// the reason: a section that silently shipped nothing would lose logs.
func TestLogsSectionRefusedForNow(t *testing.T) {
	cfg := agentYAML(t, "logs:\n  files: [{path: /var/log/kolla/keystone/*.log}]\n  sink: {type: stdout}\n")
	for _, cmd := range [][]string{{"run", "--", "true"}, {"sidecar"}} {
		a := startAgent(t, nil, append([]string{"--config", cfg}, cmd...)...)
		a.wantExit(1)
		if out := a.out.String(); !strings.Contains(out, "logs: shipping log files is not in this version of the agent yet") {
			t.Errorf("%s:\n%s", cmd[0], out)
		}
	}
}
