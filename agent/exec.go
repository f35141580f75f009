package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Exec replaces the agent with command (kubernetes-entrypoint's COMMAND): the
// service becomes the container's main process and the agent costs nothing
// after it. It returns only on failure.
//
// helm-toolkit's init container set COMMAND to "echo done" until 2019, and
// charts derived from it still do: kubernetes-entrypoint's Ubuntu images
// can run it and the agent's scratch image cannot, so an echo the image
// lacks is done here, as a shell's builtin would.
func Exec(command []string) error {
	if command[0] == "echo" {
		if _, err := exec.LookPath("echo"); err != nil {
			_, err := fmt.Fprintln(os.Stdout, strings.Join(command[1:], " "))
			return err
		}
	}
	return execEnv(command, os.Environ())
}

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
