package probes

// Workers are the live children of a service's main process, each by PID
// and start time (a PID reused by another process is not the same worker).
type Workers map[int]uint64

// WorkersOf lists pid's live children under root (a /proc; "" for the
// real one). A service that forks none has an empty set.
func WorkersOf(root string, pid int) Workers {
	w := Workers{}
	_ = eachProc(orProcRoot(root), pid, func(p int, st procStat) { // no /proc: no workers to wait for
		if st.ppid == pid && isLiveState(st.state) {
			w[p] = st.startTime
		}
	})
	return w
}

// Gone reports whether every one of w has exited (or is a zombie): a
// graceful reload has replaced them all.
func (w Workers) Gone(root string) bool {
	root = orProcRoot(root)
	for pid, start := range w {
		st, err := readProcStat(root, pid)
		if err == nil && st.startTime == start && isLiveState(st.state) {
			return false
		}
	}
	return true
}
