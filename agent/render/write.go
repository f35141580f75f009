package render

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile replaces f.Host with f.Data so that a reader sees the old file
// or the new one, never a part: the data goes to a temporary file in the same
// directory, which gets its owner and then its mode (chown clears setuid and
// setgid, so the order matters), is fsync'd, and is renamed over path; the
// directory is fsync'd so the rename survives a crash. mode carries the
// permission bits and fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky. A uid
// or gid of -1 leaves that id as the process creates it. A symlink at path is
// replaced, never followed. The directory must exist.
func WriteFile(f File) error {
	_, err := ReplaceFile(f)
	return err
}

// ReplaceFile is WriteFile that also says whether f.Host was replaced,
// for a caller that undoes its writes: the directory's fsync can fail after
// the rename.
func ReplaceFile(file File) (renamed bool, err error) {
	path, data, mode, uid, gid := file.Host, file.Data, file.Mode, file.UID, file.GID
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil && !renamed {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return false, err
	}
	if uid != -1 || gid != -1 {
		if err = f.Chown(uid, gid); err != nil {
			return false, err
		}
	}
	if err = f.Chmod(mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)); err != nil {
		return false, err
	}
	if err = f.Sync(); err != nil {
		return false, err
	}
	if err = f.Close(); err != nil {
		return false, err
	}
	if err = os.Rename(tmp, path); err != nil {
		return false, err
	}
	return true, SyncDir(dir)
}

// syncDir makes a rename or a create in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	// Some filesystems cannot fsync a directory; the rename is done anyway.
	if errors.Is(err, syscall.EINVAL) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
