package probes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FinderConfig says how the sidecar recognises the service's main process
// in the pod's shared PID namespace. Exactly one of PIDFile, Name and
// Cmdline is set.
type FinderConfig struct {
	// PIDFile is a file holding the pid (a daemon's pid file).
	PIDFile string
	// Name matches a process's comm (which the kernel truncates to 15
	// bytes), the base name of its argv[0], or the base name of its
	// executable.
	Name string
	// Cmdline is a regexp matched against the command line, its arguments
	// joined by single spaces.
	Cmdline string
	// ProcRoot is where procfs is mounted; default /proc.
	ProcRoot string
	// Root prefixes PIDFile (the agent's --root); may be "".
	Root string
}

// commLen is the most of a process name the kernel keeps in comm
// (TASK_COMM_LEN less its NUL).
const commLen = 15

// finderScanEvery bounds full /proc scans: a PID() call that finds the last
// process gone rescans at most this often, so a service that stays down does
// not cost a scan per check.
const finderScanEvery = 500 * time.Millisecond

// Finder implements PIDSource for a process the agent did not start: it finds
// the service once, keeps its pid while that process lives and still
// matches, and finds it again when it restarts. It is safe for concurrent
// use.
type Finder struct {
	procRoot string
	pidFile  string // Root applied
	name     string
	cmdline  *regexp.Regexp
	describe string
	self     int
	now      func() time.Time // injectable for tests

	mu       sync.Mutex
	last     procID // the last process found; zero before the first find
	valid    bool   // last was still alive and matching at the last look
	lastScan time.Time
	restarts int
}

// procID names one process: a pid alone may be reused by another.
type procID struct {
	pid   int
	start uint64
}

// NewFinder validates cfg and returns a Finder. It does not look for the
// process yet: the service may well start after the agent.
func NewFinder(cfg FinderConfig) (*Finder, error) {
	set := 0
	for _, s := range []string{cfg.PIDFile, cfg.Name, cfg.Cmdline} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return nil, errors.New("process finder: set exactly one of pidFile, name and cmdline")
	}
	f := &Finder{procRoot: orProcRoot(cfg.ProcRoot), self: os.Getpid(), now: time.Now}
	if fi, err := os.Stat(f.procRoot); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("process finder: procRoot %s is not a directory", f.procRoot)
	}
	switch {
	case cfg.PIDFile != "":
		f.pidFile = cfg.PIDFile
		if cfg.Root != "" {
			f.pidFile = filepath.Join(cfg.Root, cfg.PIDFile)
		}
		f.describe = "pidfile=" + cfg.PIDFile
	case cfg.Name != "":
		if strings.Contains(cfg.Name, "/") {
			return nil, fmt.Errorf("process finder: name %q: want a base name without '/'", cfg.Name)
		}
		f.name = cfg.Name
		f.describe = "name=" + cfg.Name
	default:
		re, err := regexp.Compile(cfg.Cmdline)
		if err != nil {
			return nil, fmt.Errorf("process finder: cmdline: %w", err)
		}
		f.cmdline = re
		f.describe = "cmdline=" + cfg.Cmdline
	}
	return f, nil
}

// Describe says how the process is found, for logs: "name=keystone".
func (f *Finder) Describe() string { return f.describe }

// Restarts counts how often the process found changed after the first find.
func (f *Finder) Restarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarts
}

// PID implements PIDSource. While the last process found is alive and still
// matches it costs a few reads of that one process; otherwise it scans /proc,
// at most once per finderScanEvery, and returns 0 until a process is found.
func (f *Finder) PID() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pidFile != "" {
		return f.fromPIDFile()
	}
	if f.valid && f.stillMatches(f.last) {
		return f.last.pid
	}
	f.valid = false
	now := f.now()
	if !f.lastScan.IsZero() && now.Sub(f.lastScan) < finderScanEvery {
		return 0
	}
	f.lastScan = now
	id, ok := f.scan()
	if !ok {
		return 0
	}
	f.found(id)
	return id.pid
}

// found records id as the current process, counting a restart if it is not
// the one found before.
func (f *Finder) found(id procID) {
	if f.last != (procID{}) && f.last != id {
		f.restarts++
	}
	f.last, f.valid = id, true
}

// fromPIDFile reads the pid file on every call: it is one small read, and a
// daemon rewrites it when it restarts.
func (f *Finder) fromPIDFile() int {
	b, err := os.ReadFile(f.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	st, err := readProcStat(f.procRoot, pid)
	if err != nil || !isLiveState(st.state) {
		return 0 // a stale pid file: the process is gone
	}
	f.found(procID{pid, st.startTime})
	return pid
}

// stillMatches reports whether id is still that process (same start time:
// the pid was not reused), alive, and still matching (it did not exec into
// something else).
func (f *Finder) stillMatches(id procID) bool {
	st, err := readProcStat(f.procRoot, id.pid)
	if err != nil || !isLiveState(st.state) || st.startTime != id.start {
		return false
	}
	return f.matches(id.pid, st)
}

// scan looks at every process and picks the main one among those matching:
// one whose parent does not match too (the uWSGI master, not its workers),
// the oldest if there are several.
func (f *Finder) scan() (procID, bool) {
	d, err := os.Open(f.procRoot)
	if err != nil {
		return procID{}, false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return procID{}, false
	}
	type match struct {
		id   procID
		ppid int
	}
	matched := make(map[int]match)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 || pid == f.self {
			continue
		}
		st, err := readProcStat(f.procRoot, pid)
		if err != nil || !isLiveState(st.state) {
			continue
		}
		if f.matches(pid, st) {
			matched[pid] = match{procID{pid, st.startTime}, st.ppid}
		}
	}
	var best procID
	for pid, m := range matched {
		if _, parentMatches := matched[m.ppid]; parentMatches {
			continue
		}
		if best.pid == 0 || m.id.start < best.start || (m.id.start == best.start && pid < best.pid) {
			best = m.id
		}
	}
	return best, best.pid != 0
}

// matches reports whether process pid (whose stat is st) is the service.
// The cheapest test comes first: comm is already in st.
func (f *Finder) matches(pid int, st procStat) bool {
	dir := filepath.Join(f.procRoot, strconv.Itoa(pid))
	if f.cmdline != nil {
		args, ok := readCmdline(dir)
		return ok && f.cmdline.MatchString(strings.Join(args, " "))
	}
	want := f.name
	if len(want) > commLen {
		want = want[:commLen]
	}
	if st.comm == want {
		return true
	}
	if args, ok := readCmdline(dir); ok && filepath.Base(args[0]) == f.name {
		return true
	}
	// The executable: for a process whose argv[0] was rewritten. Unreadable
	// for another user's process unless the agent may ptrace it.
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	return err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == f.name
}

// readCmdline returns a process's arguments; ok is false for a kernel thread
// or a zombie, whose cmdline is empty.
func readCmdline(dir string) ([]string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return nil, false
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, false
	}
	return strings.Split(string(b), "\x00"), true
}
