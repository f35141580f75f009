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
// committed. tag names the records' stream (FileSpec.Tag); fields are
// ShipperConfig.Fields, added by the sink to every record (the Shipper
// passes the same map to every Send; Send must not change it). recs and
// their Data are the Shipper's buffer, reused once Send returns: a sink
// that keeps them must copy them. A Send that blocks must return when ctx
// ends.
type Sink interface {
	Send(ctx context.Context, tag string, fields map[string]string, recs []Record) error
}

// Observer is told how shipping goes: for metrics, and to show the duty
// as degraded while the sink fails. Its methods are called from Run's
// goroutine, one at a time, and must not block.
type Observer interface {
	// Shipped: a batch of records of one file, bytes of Data in all, was
	// acknowledged by the sink and its offsets committed.
	Shipped(tag string, records, bytes int)
	// Failed: a pass failed (the sink, reading a file, or writing the
	// offsets), before the backoff; it is retried.
	Failed(err error)
	// Recovered: the first success after a failure: a batch acknowledged
	// and committed (before its Shipped), or a pass with nothing to ship.
	Recovered()
	// Skipped: a path under a glob became something other than a regular
	// file (what: symlink, FIFO, socket, device, directory); it is not
	// opened, and the other files ship on.
	Skipped(path, what string)
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
	// BatchBytes bounds one Send (the records' bytes; and one record per
	// 64 of them at most); default 512 KiB. While a file has a backlog,
	// the shipper holds a few times as much in memory (the records beside
	// their bytes, the sink's encoding of them), and lets go of it once
	// caught up: the files are the buffer. A record that grows as large
	// (a message that never ends) is cut there.
	BatchBytes int
	// Fields are added to every record (the pod, namespace and container,
	// say), by each sink its own way: keys of the Forward record, keys of
	// the JSON object on stdout, params of syslog's structured data. A key
	// is 1 to 32 printable US-ASCII characters without '=', ' ', ']' or
	// '"' (RFC 5424's PARAM-NAME, so that every sink can carry it), and not
	// one the records have already: message, file, offset, id, partial,
	// tag.
	Fields map[string]string
	// Drain bounds the last pass Run makes when its context ends: what the
	// files hold then, the records still being grouped included, shipped
	// and committed; a sink that fails meanwhile is retried until then,
	// and what is not acknowledged by then is shipped by the next start.
	// Default 5s; negative: none.
	Drain    time.Duration
	Observer Observer // nil: none
	Logger   *slog.Logger
}

// Shipper tails the files and ships their records, committing each file's
// offset once the sink has acknowledged what is before it.
type Shipper struct {
	cfg     ShipperConfig
	log     *slog.Logger
	files   map[string]*shipped // by path
	maxRecs int                 // records in one batch
	readBuf []byte              // the followers' buffer
	failing bool                // the last pass failed
}

// shipped is one followed path: its follower, its grouper, and what has
// been read but not yet acknowledged.
type shipped struct {
	path    string
	tag     string
	fl      *follower
	g       grouper
	line    func(Line) bool // gives a line to g, for fl.Read
	pending []Record        // their Data are in g's buffer
	size    int             // bytes of Data in pending
	lastAt  time.Time       // when a line was last read
	acked   map[string]Position
	skipped string // what the path was when last skipped ("" once it is a file)
}

// NewShipper checks cfg.
func NewShipper(cfg ShipperConfig) (*Shipper, error) {
	if cfg.Sink == nil || cfg.StateDir == "" || len(cfg.Files) == 0 {
		return nil, errors.New("logs: a sink, a state directory and files are needed")
	}
	for k := range cfg.Fields {
		if err := checkFieldKey(k); err != nil {
			return nil, fmt.Errorf("logs: fields: key %q: %w", k, err)
		}
	}
	cfg.Fields = maps.Clone(cfg.Fields)
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
		// 512 KiB ships as fast as 1 MiB (BenchmarkShipForward) in half
		// the memory.
		cfg.BatchBytes = 512 << 10
	}
	if cfg.Drain == 0 {
		cfg.Drain = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Shipper{cfg: cfg, log: cfg.Logger, files: map[string]*shipped{}, maxRecs: max(1, cfg.BatchBytes/64)}, nil
}

func checkFieldKey(k string) error {
	if len(k) == 0 || len(k) > 32 {
		return errors.New("want 1 to 32 characters")
	}
	for i := range len(k) {
		if c := k[i]; c <= ' ' || c >= 127 || c == '=' || c == ']' || c == '"' {
			return fmt.Errorf("%q is not allowed", c)
		}
	}
	switch k {
	case "message", "file", "offset", "id", "partial", "tag":
		return errors.New("the records have it already")
	}
	return nil
}

// Run ships until ctx ends, then drains (ShipperConfig.Drain) and returns
// nil; an error only when it cannot start. A sink that fails is retried
// with backoff and nothing more is read meanwhile: the files are the
// buffer.
func (s *Shipper) Run(ctx context.Context) error {
	saved, err := loadState(s.cfg.StateDir)
	if err != nil {
		return err
	}
	defer func() {
		for _, sh := range s.files {
			sh.fl.Close()
		}
		clear(s.files) // another Run starts from the offsets file
	}()
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
	// watched: the directories whose inotify watch holds. Lines written
	// to a file in one are seen at once; a file elsewhere (a glob with a
	// wildcard directory whose watch failed) is looked at every tick.
	watched := map[string]bool{}
	watchAll := func() (all bool) {
		all = true
		for p := range s.files {
			d := filepath.Dir(p)
			if !watched[d] {
				watched[d] = w.Add(d) == nil
				all = all && watched[d]
			}
		}
		return all
	}
	for _, f := range s.cfg.Files {
		w.Add(filepath.Dir(f.Glob)) // a directory that is not there yet is found by the rescan
	}
	s.expand()
	allWatched := watchAll()
	rescan := time.NewTicker(s.cfg.Rescan)
	defer rescan.Stop()
	// The tick is needed only while a record is being grouped (to flush it
	// after Idle) or a file is not under a watch: an idle agent does not
	// wake for it. A ticker nobody receives from costs nothing.
	tick := time.NewTicker(s.cfg.Idle / 2)
	defer tick.Stop()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.pass(ctx, false)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			s.failed(err, backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		s.succeeded()
		backoff = 100 * time.Millisecond
		var tickC <-chan time.Time
		if !allWatched || s.grouping() || s.keeping() {
			tickC = tick.C
		}
		select {
		case <-ctx.Done():
		case ev := <-w.Events:
			if ev.Has(fsnotify.Create) && s.follow(ev.Name) != nil { // a new file, at once
				allWatched = watchAll()
			}
		case err := <-w.Errors:
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.expand()
				allWatched = watchAll()
			}
		case <-rescan.C:
			s.expand()
			for _, f := range s.cfg.Files {
				w.Add(filepath.Dir(f.Glob))
			}
			allWatched = watchAll()
		case <-tickC:
		}
	}
	s.drain(ctx)
	return nil
}

// keeping reports whether some done file is kept open for a late write
// (writerGrace): it is looked at again, and closed.
func (s *Shipper) keeping() bool {
	for _, sh := range s.files {
		if len(sh.fl.closing) > 0 {
			return true
		}
	}
	return false
}

// grouping reports whether a record is being grouped in some file: it is
// flushed once nothing followed it for Idle.
func (s *Shipper) grouping() bool {
	for _, sh := range s.files {
		if sh.g.open {
			return true
		}
	}
	return false
}

// drain is the last pass, once parent has ended: bounded by Drain,
// retried with backoff while the sink fails.
func (s *Shipper) drain(parent context.Context) {
	if s.cfg.Drain < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), s.cfg.Drain)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := s.pass(ctx, true)
		if err == nil {
			s.succeeded()
			return
		}
		if ctx.Err() == nil {
			s.failed(err, backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
		if ctx.Err() != nil {
			s.log.Warn("logs: stopping with records not shipped; the next start ships them", "error", err.Error(), "drain", s.cfg.Drain.String())
			return
		}
	}
}

func (s *Shipper) failed(err error, retry time.Duration) {
	s.log.Warn("logs: shipping failed; retrying, the files keep what is not shipped", "error", err.Error(), "retry_in", retry.String())
	s.failing = true
	if s.cfg.Observer != nil {
		s.cfg.Observer.Failed(err)
	}
}

func (s *Shipper) succeeded() {
	if !s.failing {
		return
	}
	s.failing = false
	s.log.Info("logs: shipping again")
	if s.cfg.Observer != nil {
		s.cfg.Observer.Recovered()
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
		sh := &shipped{path: path, tag: tag, fl: newFollower(path, s.cfg.MaxLine, s.logf), g: grouper{firstLine: s.cfg.FirstLine, batch: s.cfg.BatchBytes + s.cfg.BatchBytes/4}, acked: map[string]Position{}}
		if s.readBuf == nil {
			s.readBuf = make([]byte, readChunk)
		}
		sh.fl.buf = s.readBuf // one file is read at a time
		sh.line = func(l Line) bool {
			if r, ok := sh.g.add(l); ok {
				sh.add(r, s.maxRecs)
			}
			if sh.g.pending() >= s.cfg.BatchBytes {
				if r, ok := sh.g.cut(); ok {
					sh.add(r, s.maxRecs)
				}
			}
			return sh.size < s.cfg.BatchBytes && len(sh.pending) < s.maxRecs
		}
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
// offsets are committed after each acknowledged batch. The final pass
// also ships the records still being grouped.
func (s *Shipper) pass(ctx context.Context, final bool) error {
	for _, p := range slices.Sorted(maps.Keys(s.files)) {
		sh := s.files[p]
		finished := sh.fl.nfin
		for {
			full, err := s.fill(sh, final)
			if err != nil {
				return err
			}
			if len(sh.pending) == 0 {
				break
			}
			if err := s.ship(ctx, sh); err != nil {
				return err
			}
			if !full {
				sh.idle()
				break // read all there was
			}
		}
		if sh.fl.nfin != finished && len(sh.pending) == 0 {
			// Done with a rotated file and nothing left to ship: its
			// offset goes from the state now, not at the next batch.
			if err := s.commit(); err != nil {
				return fmt.Errorf("saving the offsets: %w", err)
			}
		}
	}
	return nil
}

func (sh *shipped) add(r Record, maxRecs int) {
	if len(sh.pending) == cap(sh.pending) {
		// Doubling while small, then a full batch's worth at once:
		// append's steps would allocate several times what a batch holds.
		n := max(len(sh.pending), 64)
		if len(sh.pending) >= maxRecs/16 {
			n = max(maxRecs-len(sh.pending), len(sh.pending)/4)
		}
		sh.pending = slices.Grow(sh.pending, n)
	}
	sh.pending = append(sh.pending, r)
	sh.size += len(r.Data)
}

// idle lets go of the memory of a full batch once the file has been
// caught up with: a file that was busy once does not keep it.
func (sh *shipped) idle() {
	if cap(sh.pending) > 256 {
		sh.pending = nil
	}
	sh.g.shrink()
}

// fill reads lines until the batch is full or the file has no more, and
// flushes a record nothing followed for Idle (or any, when final). full:
// it stopped because the batch is full.
func (s *Shipper) fill(sh *shipped, final bool) (full bool, err error) {
	for {
		if sh.size >= s.cfg.BatchBytes || len(sh.pending) >= s.maxRecs {
			return true, nil
		}
		// sh.line stops the read when the batch is full: reading on is
		// only bounded here so that a nearly full batch does not read a
		// few bytes at a time.
		n, err := sh.fl.Read(max(s.cfg.BatchBytes-sh.size, readChunk), sh.line)
		if nre := (*NotRegularError)(nil); errors.As(err, &nre) {
			if sh.skipped != nre.What {
				sh.skipped = nre.What
				s.log.Warn("logs: skipping a path that is not a regular file", "path", nre.Path, "is", nre.What)
				if s.cfg.Observer != nil {
					s.cfg.Observer.Skipped(nre.Path, nre.What)
				}
			}
			break
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", sh.path, err)
		}
		sh.skipped = ""
		if n == 0 {
			break
		}
		sh.lastAt = time.Now()
	}
	if sh.g.open && (final || time.Since(sh.lastAt) >= s.cfg.Idle) {
		if r, ok := sh.g.flush(); ok {
			sh.add(r, s.maxRecs)
		}
	}
	return false, nil
}

// ship sends the pending records and commits the offsets they reach: for
// each file, the end of its last record, with the marker of that offset.
func (s *Shipper) ship(ctx context.Context, sh *shipped) error {
	if err := s.cfg.Sink.Send(ctx, sh.tag, s.cfg.Fields, sh.pending); err != nil {
		return err
	}
	for i, r := range sh.pending {
		if i+1 < len(sh.pending) && sameIdentity(sh.pending[i+1].File, r.File) {
			continue
		}
		p := r.File
		p.Offset, p.Mark = r.End, digest(r.mark)
		sh.acked[key(p)] = p
	}
	recs, size := len(sh.pending), sh.size
	clear(sh.pending) // no hold on buffers the grouper lets go
	sh.pending, sh.size = sh.pending[:0], 0
	sh.g.reset()
	if err := s.commit(); err != nil {
		return fmt.Errorf("saving the offsets: %w", err)
	}
	s.succeeded()
	if s.cfg.Observer != nil {
		s.cfg.Observer.Shipped(sh.tag, recs, size)
	}
	return nil
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
