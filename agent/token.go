package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// tokenDir is where the kubelet mounts the pod's ServiceAccount token.
const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// closeToken keeps the API token from the service it shares a container
// with. In `run` the agent is root and the service runs as its own user
// (run.user, or Apache's workers). The kubelet makes the token readable to
// the pod's fsGroup (0640), and the service's user is in that group: mode
// 0700 on the directory above the token's volume shuts it out, while root
// (the agent, client-go re-reading the rotated token) goes on reading it.
// The directory is the container's own, made by the runtime for the
// mount; a read-only root filesystem leaves it as it is, with a warning.
func (a *Agent) closeToken() {
	if os.Geteuid() != 0 {
		return // the service runs as the agent's user: nothing to close it with
	}
	token := a.path(filepath.Join(tokenDir, "token"))
	if _, err := os.Stat(token); err != nil {
		return // no token in this container
	}
	dir := filepath.Dir(a.path(tokenDir))
	fi, err := os.Lstat(dir)
	if err == nil && (!fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != 0) {
		err = errors.New("not a directory of root's")
	}
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = os.Chmod(dir, 0o700)
	}
	if err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err
		}
		a.log.Warn("the API token stays readable to the service's group: its directory cannot be closed", "path", dir, "error", err.Error())
		return
	}
	a.log.Debug("the API token's directory is closed to the service", "path", dir)
}
