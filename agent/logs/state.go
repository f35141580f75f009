package logs

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// headLen is how many of a file's first bytes fingerprint it; markLen how
// many bytes before the committed offset are kept as its marker.
const (
	headLen = 1024
	markLen = 64
)

// Position is where shipping of one file stands: its identity, and the
// offset up to which every byte has been acknowledged by the sink.
type Position struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// Head is the hash of the file's first HeadLen bytes (fewer while the
	// file is shorter than headLen): with (Dev, Ino) it tells the file
	// from another that reuses the inode.
	Head    string `json:"head"`
	HeadLen int    `json:"headLen"`
	// First is the hash of the file's first line (at most headLen bytes),
	// set once a line of it is read: with (Dev, Ino) it is the file's id
	// in the records. Unlike Head it does not change while a short file
	// grows, so a record sent again by the next run of the agent has the
	// id it had, and a receiver can drop it. Not saved: it is read again.
	First string `json:"-"`
	// Offset: every byte before it was acknowledged.
	Offset int64 `json:"offset"`
	// Mark is the hash of the markLen bytes before Offset: a file truncated
	// and written again while the agent was away no longer has them.
	Mark string `json:"mark,omitempty"`
}

// identify reads f's identity: device, inode, and the fingerprint of its
// first bytes.
func identify(f logFile) (Position, error) {
	fi, err := f.Stat()
	if err != nil {
		return Position{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Position{}, errors.New("no inode")
	}
	p := Position{Path: f.Name(), Dev: uint64(st.Dev), Ino: st.Ino}
	head := make([]byte, headLen)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Position{}, err
	}
	p.Head, p.HeadLen = digest(head[:n]), n
	return p, nil
}

// firstLine is First for f: the hash of its first line, or of its first
// headLen bytes when they hold no newline (a long line's first piece).
func firstLine(f io.ReaderAt) string {
	b := make([]byte, headLen)
	n, _ := f.ReadAt(b, 0)
	b = b[:n]
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	}
	return digest(b)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:12])
}

// sameFile says whether f is the file p describes: same device and inode,
// and its first p.HeadLen bytes are the ones p saw (a file that grew past
// them still matches; an inode reused by a new file does not).
func sameFile(f logFile, p Position) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || uint64(st.Dev) != p.Dev || st.Ino != p.Ino {
		return false, nil
	}
	return headMatches(f, p)
}

// headMatches compares f's first p.HeadLen bytes with p's fingerprint,
// whatever its inode (a copy made by copytruncate has another).
func headMatches(f io.ReaderAt, p Position) (bool, error) {
	head := make([]byte, p.HeadLen)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return n == p.HeadLen && digest(head) == p.Head, nil
}

// markAt is the marker of offset off in f: the hash of the bytes before it.
func markAt(f io.ReaderAt, off int64) (string, error) {
	start := max(0, off-markLen)
	b := make([]byte, off-start)
	n, err := f.ReadAt(b, start)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if int64(n) < off-start {
		return "", nil // the file is shorter than the offset: no marker to match
	}
	return digest(b), nil
}

// stateFile is the offsets file on the log volume.
type stateFile struct {
	Version int        `json:"version"`
	Files   []Position `json:"files"`
}

const stateName = "offsets.json"

// loadState reads the offsets; none yet is an empty state. A file that
// cannot be read as offsets is an error naming it: starting over would
// ship every file again.
func loadState(dir string) ([]Position, error) {
	path := filepath.Join(dir, stateName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s stateFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w (move it away to ship every file from its start)", path, err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", path, s.Version)
	}
	for i, p := range s.Files {
		switch {
		case !filepath.IsAbs(p.Path):
			return nil, fmt.Errorf("%s: files[%d].path: %q is not an absolute path", path, i, p.Path)
		case p.Offset < 0:
			return nil, fmt.Errorf("%s: files[%d].offset: %d is negative", path, i, p.Offset)
		case p.HeadLen < 0 || p.HeadLen > headLen:
			return nil, fmt.Errorf("%s: files[%d].headLen: %d (want 0 to %d)", path, i, p.HeadLen, headLen)
		}
	}
	return s.Files, nil
}

// saveState writes the offsets: a temporary file, fsync'd, renamed over
// the old one, and the directory fsync'd, so a crash leaves the old offsets
// or the new, never a torn file.
func saveState(dir string, files []Position) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(stateFile{Version: 1, Files: files})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".offsets-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, stateName))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Found is where a saved position leads after the agent's absence.
type Found struct {
	// Tail is the file holding the unshipped bytes after the saved offset
	// (the same file, or the rotated copy it became); nil when none is
	// left. TailFrom is where to read it from.
	Tail     logFile
	TailFrom int64
	// How says what happened: "same", "renamed to NAME", "truncated,
	// copy NAME", "compressed copy NAME", "truncated", "gone".
	How string
}

// locate finds the file a saved position describes: at its path, or
// renamed in the same directory (app.log -> app.log.1, any number of
// rotations on), or, when the file at its path was truncated (copytruncate),
// the copy holding its old bytes, found by the fingerprint of its head;
// either may have been compressed since (gzip, read decompressed).
func locate(p Position) (Found, error) {
	dir := filepath.Dir(p.Path)
	if f, err := openLog(p.Path); err == nil {
		same, err := sameFile(f, p)
		if err != nil {
			f.Close()
			return Found{}, err
		}
		if same {
			mark, err := markAt(f, p.Offset)
			if err != nil {
				f.Close()
				return Found{}, err
			}
			if mark == p.Mark || p.Offset == 0 {
				return Found{Tail: f, TailFrom: p.Offset, How: "same"}, nil
			}
			f.Close()
			// Truncated (and perhaps written again): the old bytes, if
			// anywhere, are in a copy.
			if c := findCopy(dir, p, false); c != nil {
				return Found{Tail: c, TailFrom: p.Offset, How: copyHow(c)}, nil
			}
			return Found{How: "truncated"}, nil
		}
		f.Close()
	}
	if c := findCopy(dir, p, true); c != nil {
		return Found{Tail: c, TailFrom: p.Offset, How: "renamed to " + filepath.Base(c.Name())}, nil
	}
	if c := findCopy(dir, p, false); c != nil {
		return Found{Tail: c, TailFrom: p.Offset, How: copyHow(c)}, nil
	}
	return Found{How: "gone"}, nil
}

// copyHow is Found.How for a copy: made by copytruncate, or the
// compressed copy of the file (renamed or copied first).
func copyHow(c logFile) string {
	if _, gz := c.(*gzFile); gz {
		return "compressed copy " + filepath.Base(c.Name())
	}
	return "truncated, copy " + filepath.Base(c.Name())
}

// findCopy looks in dir for the file p was (byInode: same device and
// inode, renamed, or the compressed file it became: logrotate keeps no
// inode there, so by its content, as a copy) or a copy of it (its head and
// the marker at p's offset match, another inode), long enough to hold
// p.Offset. Each file is the one listed (sibling.open); one gone since
// the listing makes it look again.
func findCopy(dir string, p Position, byInode bool) logFile {
	for try := 0; ; try++ {
		f, moved := findCopyOnce(dir, p, byInode)
		if f != nil || !moved || try == listTries {
			return f
		}
	}
}

func findCopyOnce(dir string, p Position, byInode bool) (_ logFile, moved bool) {
	sibs := siblings(dir)
	// The newest first: a copy of the file being read is among the last
	// made, found before logrotate's next renames (every gzip file is
	// opened to look at its head).
	slices.SortStableFunc(sibs, func(a, b sibling) int { return b.mtime.Compare(a.mtime) })
	for _, e := range sibs {
		path := filepath.Join(dir, e.name)
		if path == p.Path && !byInode {
			continue
		}
		f, err := e.open(dir) // a FIFO among the siblings must not block
		if errors.Is(err, errMoved) {
			moved = true // removed since the listing (a plain copy, compressed)
			continue
		}
		if err != nil {
			continue
		}
		ok := false
		if byInode {
			ok, _ = sameFile(f, p)
		} else if h, _ := headMatches(f, p); h {
			if fi, err := f.Stat(); err == nil && fi.Size() >= p.Offset {
				m, _ := markAt(f, p.Offset)
				ok = m == p.Mark || p.Offset == 0
			}
		}
		if ok {
			return f, false
		}
		f.Close()
	}
	return nil, moved
}

// compressedExt are the names' endings of files compressed by logrotate
// (compresscmd, compressext) that are not read: their bytes are not lines.
var compressedExt = []string{".xz", ".bz2", ".zst", ".lz4", ".lzma", ".lzo", ".Z", ".zip", ".br"}

// sibling is a file of a directory as a listing saw it.
type sibling struct {
	name     string
	mtime    time.Time
	born     time.Time // creation (not birth's: a compressed file's own)
	dev, ino uint64
}

// is: f, opened by the sibling's name, is the file the listing saw: its
// device, inode and creation time. The inode alone is not enough:
// logrotate removes log.1 once compressed and creates the next log.1 a
// moment later, often with the same inode, so a name listed before that
// and opened after is another file with it.
func (e sibling) is(f logFile) bool { return isInode(f, e.dev, e.ino) && created(f).Equal(e.born) }

// errMoved: a file listed is under no name of its directory now (a plain
// copy compressed, then removed), or kept moving.
var errMoved = errors.New("the file moved while its directory was read")

// open opens the file the listing saw in dir: by its name, or, renamed
// since, by its new name, found by its inode and creation time in a new
// listing. logrotate renames its files one by one (log.N.gz to
// log.N+1.gz, the oldest first), hundreds with a large rotate count: on a
// loaded node that outlasts any listing, and a scan that looked again
// from the start each time a name was another file's gave up, missing the
// files after the one it had reached.
func (e sibling) open(dir string) (logFile, error) {
	for try := 0; ; try++ {
		// The identity first: the file now at the name may be one gzip
		// has only begun (not yet readable as gzip).
		f, err := openLog(filepath.Join(dir, e.name))
		switch {
		case err == nil && e.is(f):
			return asCopy(f)
		case err == nil:
			f.Close()
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		if try == listTries {
			return nil, errMoved
		}
		// One read of the directory: one missed mid-rename is looked for
		// again.
		sibs := listOnce(dir)
		if i := slices.IndexFunc(sibs, func(x sibling) bool { return x.dev == e.dev && x.ino == e.ino && x.born.Equal(e.born) }); i >= 0 {
			e.name = sibs[i].name
		}
	}
}

// isInode: f is the file with this device and inode.
func isInode(f logFile, dev, ino uint64) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && st.Ino == ino
}

// listTries bounds the looks again of findCopy and rotatedAfter when a
// file moved under them; listFor how long siblings lists a directory that
// keeps changing.
const (
	listTries = 5
	listFor   = time.Second
)

// siblings are the regular files of dir that may hold a log file's bytes:
// where a file that left its path is looked for, by findCopy and by
// rotatedFrom. Files other compressors made are left out, and so is a
// gzip file while the file it is compressed from is still there (logrotate
// removes it once the compressed copy is whole).
// logrotate renames its files one by one (base.N to base.N+1, the oldest
// first), and a directory read meanwhile can give one file under two names
// and miss another: read whole again, or skipped. The directory is listed
// until two listings in a row give each name the same inode (a rename
// between them, or one seen mid-way, makes them differ), a millisecond
// apart once they differed, for the renames to end.
func siblings(dir string) []sibling {
	deadline := time.Now().Add(listFor)
	last := listOnce(dir)
	for {
		cur := listOnce(dir)
		if slices.EqualFunc(cur, last, func(a, b sibling) bool { return a.name == b.name && a.dev == b.dev && a.ino == b.ino }) || time.Now().After(deadline) {
			return cur
		}
		time.Sleep(time.Millisecond)
		last = cur
	}
}

func listOnce(dir string) []sibling {
	ents, _ := os.ReadDir(dir)
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	var out []sibling
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || slices.ContainsFunc(compressedExt, func(x string) bool { return strings.HasSuffix(n, x) }) ||
			strings.HasSuffix(n, gzExt) && names[strings.TrimSuffix(n, gzExt)] {
			continue
		}
		// One call for the inode and the creation time: a file made
		// between two calls would pair another's.
		var stx unix.Statx_t
		err := unix.Statx(unix.AT_FDCWD, filepath.Join(dir, n), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &stx)
		if err != nil || stx.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		out = append(out, sibling{name: n, mtime: time.Unix(stx.Mtime.Sec, int64(stx.Mtime.Nsec)), born: btime(&stx, nil),
			dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), ino: stx.Ino})
	}
	return out
}

// rotatedFile is a file rotated from a log path.
type rotatedFile struct {
	path     string
	n        int // rotation number (app.log.2: 2); -1 without one (app.log-20261123)
	mtime    time.Time
	born     time.Time // creation; zero where the filesystem keeps none
	dev, ino uint64
	sib      sibling // as listed
}

// rotatedFrom lists the siblings of path named like its rotated copies
// (logrotate's base.N, base-DATE: the base name, then '.', '-' or '_' and
// a suffix with a digit in it), oldest first (olderFirst).
func rotatedFrom(path string) []rotatedFile {
	dir, base := filepath.Split(path)
	var out []rotatedFile
	for _, e := range siblings(dir) {
		rest, ok := strings.CutPrefix(e.name, base)
		if !ok || len(rest) < 2 || !strings.ContainsAny(rest[:1], ".-_") || !strings.ContainsAny(rest, "0123456789") {
			continue
		}
		path := filepath.Join(dir, e.name)
		name, gz := strings.CutSuffix(e.name, gzExt)
		r := rotatedFile{path: path, n: rotationNumber(base, name), mtime: e.mtime, dev: e.dev, ino: e.ino, sib: e}
		if !gz {
			r.born = e.born // see birth
		}
		out = append(out, r)
	}
	slices.SortFunc(out, olderFirst)
	return out
}

// rotationNumber is N of the name base.N, or -1.
func rotationNumber(base, name string) int {
	rest, ok := strings.CutPrefix(name, base+".")
	if n, err := strconv.Atoi(rest); ok && err == nil && n >= 0 && rest[0] != '+' {
		return n
	}
	return -1
}

// olderFirst orders rotated files by creation time (the order they held
// the path in), then, where it is not kept or equal, by mtime, then (files
// written within one tick of the kernel's coarse clock have the same) by
// rotation number (app.log.2 before app.log.1), then by name (dates).
func olderFirst(a, b rotatedFile) int {
	if !a.born.IsZero() && !b.born.IsZero() {
		if c := a.born.Compare(b.born); c != 0 {
			return c
		}
	}
	if c := a.mtime.Compare(b.mtime); c != 0 {
		return c
	}
	if a.n >= 0 && b.n >= 0 && a.n != b.n {
		return cmp.Compare(b.n, a.n)
	}
	return strings.Compare(a.path, b.path)
}
