package reload

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WriteVolume lays files (relative path -> content) out in dir the way the
// kubelet lays out a ConfigMap volume, so that everything that reads a
// volume reads this copy the same way: the files in a new ..<stamp>
// directory, the ..data symlink renamed over to it (the one atomic step),
// a top-level symlink per first path element, the previous version
// removed. A reader that resolved ..data before the swap keeps a whole old
// version until it is done; one after it sees the whole new one.
func WriteVolume(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	stamp := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.") + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	ts := filepath.Join(dir, stamp)
	tops := map[string]bool{}
	for rel, b := range files {
		if !filepath.IsLocal(rel) || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("volume copy: %q is not a relative path inside the volume", rel)
		}
		p := filepath.Join(ts, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeSynced(p, b, 0o644); err != nil {
			return err
		}
		tops[strings.SplitN(filepath.ToSlash(rel), "/", 2)[0]] = true
	}
	tmp := filepath.Join(dir, dataLink+"_tmp")
	os.Remove(tmp)
	if err := os.Symlink(stamp, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	names := make([]string, 0, len(tops))
	for t := range tops {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		link := filepath.Join(dir, t)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, t) {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(filepath.Join(dataLink, t), link); err != nil {
			return err
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		switch {
		case n == dataLink || n == stamp:
		case strings.HasPrefix(n, ".."):
			if n == old || (e.IsDir() && n != stamp) {
				os.RemoveAll(filepath.Join(dir, n))
			}
		case !tops[n]:
			os.Remove(filepath.Join(dir, n)) // a key the ConfigMap no longer has
		}
	}
	return nil
}
