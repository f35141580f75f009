package agent

import (
	"strings"
	"testing"
)

// helm-toolkit's COMMAND "echo done" in an image without echo (the agent's
// scratch image) is done as a builtin; any other missing command is a
// configuration error naming it.
func TestExecEchoWithoutEcho(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if err := Exec([]string{"echo", "done"}); err != nil {
		t.Errorf("echo done without an echo binary: %v", err)
	}
	err := Exec([]string{"keystone-manage", "db_sync"})
	if err == nil || !strings.Contains(err.Error(), `"keystone-manage"`) {
		t.Errorf("a missing command: %v, want an error naming it", err)
	}
}
