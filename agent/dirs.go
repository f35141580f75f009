package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/probes"
)

// checkDirs checks, before anything starts, that each directory a
// configured duty writes can be made and written as this user. A duty that
// cannot (an image's user without the directory, a read-only root
// filesystem) would otherwise retry for ever while the pod looked fine, so
// it is a configuration error naming the field, the path and the fix.
// Other errors are left to the duty, which retries them.
func (a *Agent) checkDirs(cfg *config.Config) error {
	type need struct {
		field, dir string
		mode       os.FileMode
	}
	var needs []need
	if _, s := probes.Listeners(&cfg.Probes); s != "" {
		needs = append(needs, need{"probes.socket", filepath.Dir(s), 0o755})
	}
	if cfg.Reload != nil {
		needs = append(needs, need{"reload.stateDir", cfg.Reload.StateDir, 0o700})
	}
	if cfg.Logs != nil && len(cfg.Logs.Files) > 0 {
		needs = append(needs, need{"logs.stateDir", cfg.Logs.StateDir, 0o700})
	}
	for _, n := range needs {
		path := a.path(n.dir)
		err := os.MkdirAll(path, n.mode)
		if err == nil {
			err = unix.Access(path, unix.W_OK)
		}
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
			return configErr("%s: the directory %s cannot be written as uid %d (%v): mount a writable volume there (an emptyDir) or set %s to a writable path",
				n.field, n.dir, os.Geteuid(), unwrapPath(err), n.field)
		}
	}
	return nil
}

// unwrapPath drops the path a *fs.PathError repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}
