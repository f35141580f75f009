package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Read reads agent.yaml at explicit, else at DefaultPath, both under root;
// with neither given nor there, b is nil and the embedded default applies.
// path is the file as this host sees it, source as the pod does, for logs.
func Read(root, explicit string) (path, source string, b []byte, err error) {
	source = explicit
	if source == "" {
		source = DefaultPath
	}
	path = source
	if root != "" {
		path = filepath.Join(root, source)
	}
	b, err = os.ReadFile(path)
	if explicit == "" && errors.Is(err, fs.ErrNotExist) {
		return "", "embedded default", nil, nil
	}
	return path, source, b, err
}
