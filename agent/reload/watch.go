package reload

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// dataLink is the symlink the kubelet renames over to commit a new version
// of a ConfigMap, Secret or projected volume (its AtomicWriter).
const dataLink = "..data"

// WatchConfig says what to watch and how to coalesce what it sees.
type WatchConfig struct {
	// Dirs are the mount directories of the volumes (or plain directories).
	Dirs []string
	// Quiet is how long nothing must happen before a burst is delivered;
	// MaxWait bounds how long a burst that keeps going can be held back.
	Quiet, MaxWait time.Duration
	// Rescan is how often every directory is looked at again, whatever
	// inotify said (0: never).
	Rescan time.Duration
	Logger *slog.Logger
}

// Burst is one coalesced change: the reasons seen, first and last.
type Burst struct {
	Reasons     []string // "dir: ..data swapped", "dir: rescan found a change", ...
	First, Last time.Time
}

// Watcher delivers one Burst per burst of changes to the watched volumes.
// It watches each directory itself, never a file or the ..data link (a
// watch there follows the link into the old version and is dead after the
// first swap), and triggers on ..data being created or renamed over; a
// directory without ..data triggers on any change of its entries.
type Watcher struct {
	cfg   WatchConfig
	log   *slog.Logger
	clock clock.WithTicker  // the quiet period, maxWait and the rescan; a test's fake
	seen  map[string]uint64 // dir -> fingerprint at the last look
}

// Volume describes a watched directory as found at start.
type Volume struct {
	Dir string
	// Kind is "volume" (has ..data: the kubelet updates it), "directory"
	// (no ..data: watched for any change), "file" (a single file: a
	// subPath mount, which the kubelet never updates), or "missing".
	Kind string
}

// NewWatcher checks the directories and says what each is.
func NewWatcher(cfg WatchConfig) (*Watcher, []Volume, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Quiet < 0 || cfg.MaxWait < 0 || cfg.Rescan < 0 {
		return nil, nil, errors.New("reload: negative quiet, maxWait or rescan")
	}
	if cfg.MaxWait < cfg.Quiet {
		cfg.MaxWait = cfg.Quiet
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, clock: clock.RealClock{}, seen: map[string]uint64{}}
	var vols []Volume
	for _, d := range cfg.Dirs {
		v := Volume{Dir: d, Kind: kindOf(d)}
		vols = append(vols, v)
		w.seen[d] = fingerprint(d)
	}
	return w, vols, nil
}

func kindOf(dir string) string {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return "missing"
	case !fi.IsDir():
		return "file"
	}
	if _, err := os.Lstat(filepath.Join(dir, dataLink)); err == nil {
		return "volume"
	}
	return "directory"
}

// fingerprint is what a rescan compares: the ..data link's target for a
// kubelet volume, else the names, sizes, modes and mtimes of the entries.
func fingerprint(dir string) uint64 {
	h := fnv.New64a()
	if t, err := os.Readlink(filepath.Join(dir, dataLink)); err == nil {
		h.Write([]byte("..data -> " + t))
		return h.Sum64()
	}
	fi, err := os.Stat(dir)
	if err != nil {
		h.Write([]byte(err.Error()))
		return h.Sum64()
	}
	if !fi.IsDir() {
		fmt.Fprintf(h, "%d %v %d", fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		return h.Sum64()
	}
	ents, _ := os.ReadDir(dir)
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		if i, err := e.Info(); err == nil {
			fmt.Fprintf(h, "%s %d %v %d\n", e.Name(), i.Size(), i.Mode(), i.ModTime().UnixNano())
		}
	}
	return h.Sum64()
}

// Run watches until ctx ends, sending one Burst per burst on out. A burst
// that arrives while the receiver is busy is merged into the one waiting
// to be sent, so the receiver never falls behind and never misses the
// last change.
func (w *Watcher) Run(ctx context.Context, out chan<- Burst) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("reload: inotify: %w", err)
	}
	defer fw.Close()
	watched := map[string]bool{}
	addWatches := func() {
		for _, d := range w.cfg.Dirs {
			if watched[d] {
				continue
			}
			target := d
			if kindOf(d) == "file" {
				target = filepath.Dir(d) // a file's own watch dies when it is replaced
			}
			if err := fw.Add(target); err == nil {
				watched[d] = true
			}
		}
	}
	addWatches()

	var (
		pending    *Burst
		ready      bool // pending has been quiet long enough, or waited maxWait
		overdue    bool // pending has waited maxWait: deliver it as soon as possible
		quietT     = newTimer(w.clock)
		maxT       = newTimer(w.clock)
		rescanC    <-chan time.Time
		send       chan<- Burst
		sendBurst  Burst
		dirOf      = map[string]string{} // watched path -> configured dir
		noteChange = func(reason string) {
			now := w.clock.Now()
			if pending == nil {
				pending = &Burst{First: now}
				maxT.reset(w.cfg.MaxWait)
			}
			pending.Reasons = append(pending.Reasons, reason)
			pending.Last = now
			ready = overdue
			quietT.reset(w.cfg.Quiet)
		}
	)
	for _, d := range w.cfg.Dirs {
		if kindOf(d) == "file" {
			dirOf[filepath.Dir(d)] = d
		} else {
			dirOf[d] = d
		}
	}
	if w.cfg.Rescan > 0 {
		t := w.clock.NewTicker(w.cfg.Rescan)
		defer t.Stop()
		rescanC = t.C()
	}
	rescan := func(why string) {
		addWatches()
		for _, d := range w.cfg.Dirs {
			if f := fingerprint(d); f != w.seen[d] {
				w.seen[d] = f
				noteChange(d + ": " + why + " found a change")
			}
		}
	}
	for {
		if ready && pending != nil {
			send, sendBurst = out, *pending
		} else {
			send = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("reload: inotify watch closed")
			}
			d := dirOf[filepath.Dir(ev.Name)]
			if d == "" {
				continue
			}
			if reason, ok := w.relevant(d, ev); ok {
				w.seen[d] = fingerprint(d)
				noteChange(reason)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("reload: inotify watch closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.log.Warn("reload: inotify queue overflowed; rescanning now")
				rescan("a rescan after an inotify overflow")
				continue
			}
			w.log.Warn("reload: inotify error", "error", err.Error())
		case <-rescanC:
			rescan("the periodic rescan")
		case <-quietT.c:
			quietT.stopped()
			ready = true
		case <-maxT.c:
			maxT.stopped()
			ready, overdue = true, true
		case send <- sendBurst:
			pending, ready, overdue = nil, false, false
			quietT.stop()
			maxT.stop()
		}
	}
}

// relevant says whether an event in dir (the configured path d) is a new
// version: for a kubelet volume the ..data link created or renamed over;
// for a plain directory any change but the agent's own temporary files;
// for a single file, that file.
func (w *Watcher) relevant(d string, ev fsnotify.Event) (string, bool) {
	base := filepath.Base(ev.Name)
	switch kindOf(d) {
	case "volume":
		if base == dataLink && ev.Has(fsnotify.Create) {
			return d + ": ..data swapped", true
		}
		return "", false
	case "file":
		if ev.Name == d && !ev.Has(fsnotify.Chmod) {
			return d + ": " + ev.Op.String(), true
		}
		return "", false
	}
	if ev.Has(fsnotify.Chmod) || base == dataLink+"_tmp" {
		return "", false
	}
	if fingerprint(d) == w.seen[d] {
		return "", false // written back as it was
	}
	return d + ": " + base + " " + ev.Op.String(), true
}

// timer is a timer on clk that can be reset whatever its state, with a nil
// channel while stopped.
type timer struct {
	clk clock.Clock
	t   clock.Timer
	c   <-chan time.Time
}

func newTimer(clk clock.Clock) *timer { return &timer{clk: clk} }

func (t *timer) reset(d time.Duration) {
	t.stop()
	t.t = t.clk.NewTimer(d)
	t.c = t.t.C()
}

func (t *timer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
	t.t, t.c = nil, nil
}

// stopped: the timer fired.
func (t *timer) stopped() { t.t, t.c = nil, nil }
