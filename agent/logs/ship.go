package logs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Sink receives records. Send returns once the receiver has them (an ack,
// or whatever the sink's protocol offers): only then are the offsets
// committed.
type Sink interface {
	Send(ctx context.Context, tag string, recs []Record) error
}

// FileSpec is one logs.files entry.
type FileSpec struct {
	Glob    string
	Exclude []string // globs of base names
	Tag     string   // "" : kolla.<dir>.<file>
}

// ShipperConfig says what to ship where.
type ShipperConfig struct {
	Files     []FileSpec
	Sink      Sink
	StateDir  string
	MaxLine   int            // default 256 KiB
	FirstLine *regexp.Regexp // nil: oslo.log's grouping
	Idle      time.Duration  // flush a record nothing followed for this long; default 1s
	Rescan    time.Duration  // expand the globs again; default 10s
	// BatchBytes bounds one Send; default 1 MiB. It is also what the
	// shipper holds in memory: the files are the buffer.
	BatchBytes int
	Logger     *slog.Logger
}

// Shipper tails the files and ships their records, committing each file's
// offset once the sink has acknowledged what is before it.
type Shipper struct {
	cfg   ShipperConfig
	log   *slog.Logger
	files map[string]*shipped // by path
}

// shipped is one followed path: its follower, its grouper, and what has
// been read but not yet acknowledged.
type shipped struct {
	path    string
	tag     string
	fl      *follower
	g       grouper
	pending []Record
	size    int
	lastAt  time.Time // when a line was last read
	acked   map[string]Position
}

// NewShipper checks cfg.
func NewShipper(cfg ShipperConfig) (*Shipper, error) {
	if cfg.Sink == nil || cfg.StateDir == "" || len(cfg.Files) == 0 {
		return nil, errors.New("logs: a sink, a state directory and files are needed")
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 256 << 10
	}
	if cfg.Idle <= 0 {
		cfg.Idle = time.Second
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = 10 * time.Second
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Shipper{cfg: cfg, log: cfg.Logger, files: map[string]*shipped{}}, nil
}

// Run ships until ctx ends. A sink that fails is retried with backoff and
// nothing more is read meanwhile: the files are the buffer.
func (s *Shipper) Run(ctx context.Context) error {
	saved, err := loadState(s.cfg.StateDir)
	if err != nil {
		return err
	}
	for _, p := range saved {
		sh := s.follow(p.Path)
		if sh == nil {
			continue // no longer configured
		}
		if err := sh.fl.resume(p); err != nil {
			return fmt.Errorf("logs: resuming %s: %w", p.Path, err)
		}
		sh.acked[key(p)] = p
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("logs: inotify: %w", err)
	}
	defer w.Close()
	for _, f := range s.cfg.Files {
		w.Add(filepath.Dir(f.Glob)) // a directory that is not there yet is found by the rescan
	}
	s.expand()
	rescan := time.NewTicker(s.cfg.Rescan)
	defer rescan.Stop()
	tick := time.NewTicker(s.cfg.Idle / 2)
	defer tick.Stop()
	backoff := 100 * time.Millisecond
	for {
		if err := s.pass(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("logs: the sink failed; retrying, the files keep what is not shipped", "error", err.Error(), "retry_in", backoff.String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case <-ctx.Done():
			return nil
		case <-w.Events:
		case err := <-w.Errors:
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.expand()
			}
		case <-rescan.C:
			s.expand()
			for _, f := range s.cfg.Files {
				w.Add(filepath.Dir(f.Glob))
			}
		case <-tick.C:
		}
	}
}

// expand follows every file the globs match now.
func (s *Shipper) expand() {
	for _, f := range s.cfg.Files {
		paths, _ := filepath.Glob(f.Glob)
		for _, p := range paths {
			s.follow(p)
		}
	}
}

// follow returns the shipped state of path, created if a spec matches it.
func (s *Shipper) follow(path string) *shipped {
	if sh := s.files[path]; sh != nil {
		return sh
	}
	for _, f := range s.cfg.Files {
		if ok, _ := filepath.Match(f.Glob, path); !ok || excluded(f.Exclude, filepath.Base(path)) {
			continue
		}
		tag := f.Tag
		if tag == "" {
			tag = defaultTag(path)
		}
		sh := &shipped{path: path, tag: tag, fl: newFollower(path, s.cfg.MaxLine, s.logf), g: grouper{firstLine: s.cfg.FirstLine}, acked: map[string]Position{}}
		s.files[path] = sh
		s.log.Info("logs: following", "path", path, "tag", tag)
		return sh
	}
	return nil
}

func (s *Shipper) logf(msg string, args ...any) { s.log.Info("logs: "+msg, args...) }

func excluded(globs []string, base string) bool {
	for _, g := range globs {
		if ok, _ := filepath.Match(g, base); ok {
			return true
		}
	}
	return false
}

// defaultTag is kolla.<dir>.<file>: /var/log/kolla/keystone/keystone.log
// -> kolla.keystone.keystone.
func defaultTag(path string) string {
	file := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return "kolla." + filepath.Base(filepath.Dir(path)) + "." + file
}

// pass reads what every file has, groups it, and ships it in batches;
// offsets are committed after each acknowledged batch.
func (s *Shipper) pass(ctx context.Context) error {
	for _, p := range slices.Sorted(maps.Keys(s.files)) {
		sh := s.files[p]
		for {
			if err := s.fill(sh); err != nil {
				return err
			}
			if len(sh.pending) == 0 {
				break
			}
			if err := s.ship(ctx, sh); err != nil {
				return err
			}
			if sh.size < s.cfg.BatchBytes/2 {
				break // read all there was
			}
		}
	}
	return nil
}

// fill reads lines until the batch is full or the file has no more, and
// flushes a record nothing followed for Idle.
func (s *Shipper) fill(sh *shipped) error {
	for sh.size < s.cfg.BatchBytes {
		lines, err := sh.fl.Read(s.cfg.BatchBytes - sh.size)
		if err != nil {
			return fmt.Errorf("reading %s: %w", sh.path, err)
		}
		if len(lines) == 0 {
			break
		}
		sh.lastAt = time.Now()
		for _, l := range lines {
			if r := sh.g.add(l); r != nil {
				sh.pending = append(sh.pending, *r)
				sh.size += len(r.Data)
			}
		}
	}
	if sh.g.cur != nil && time.Since(sh.lastAt) >= s.cfg.Idle {
		r := sh.g.flush()
		sh.pending = append(sh.pending, *r)
		sh.size += len(r.Data)
	}
	return nil
}

// ship sends the pending records and commits the offsets they reach.
func (s *Shipper) ship(ctx context.Context, sh *shipped) error {
	if err := s.cfg.Sink.Send(ctx, sh.tag, sh.pending); err != nil {
		return err
	}
	for _, r := range sh.pending {
		p := r.File
		p.Offset = r.End
		sh.acked[key(p)] = p
	}
	sh.pending, sh.size = sh.pending[:0], 0
	return s.commit()
}

// commit writes every file's acknowledged position. A file that left its
// path and was read to its end has no position of its own any more: its
// entry goes once its identity is not among the follower's open files.
func (s *Shipper) commit() error {
	var all []Position
	for _, sh := range s.files {
		open := map[string]bool{}
		for _, p := range sh.fl.Positions() {
			open[key(p)] = true
		}
		for k, p := range sh.acked {
			if !open[k] && len(sh.acked) > 1 {
				delete(sh.acked, k)
				continue
			}
			all = append(all, p)
		}
	}
	slices.SortFunc(all, func(a, b Position) int { return strings.Compare(a.Path+key(a), b.Path+key(b)) })
	return saveState(s.cfg.StateDir, all)
}

func key(p Position) string { return fmt.Sprintf("%d:%d:%s", p.Dev, p.Ino, p.Head) }
