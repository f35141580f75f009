package agent

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Exec replaces the agent with command (kubernetes-entrypoint's COMMAND): the
// service becomes the container's main process and the agent costs nothing
// after it. It returns only on failure.
func Exec(command []string) error { return execEnv(command, os.Environ()) }

func execEnv(command, env []string) error {
	path, err := exec.LookPath(command[0])
	if err != nil {
		return configErr("command %q: %v", command[0], err)
	}
	if err := syscall.Exec(path, command, env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}
