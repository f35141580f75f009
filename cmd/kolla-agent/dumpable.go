package main

import "golang.org/x/sys/unix"

// notDumpable puts the agent's memory and its /proc entries (its root
// directory, environment and open files) out of reach of other processes
// of its uid without CAP_SYS_PTRACE. In a pod that shares its process
// namespace, the service often runs as the agent's uid in another
// container: it could otherwise read the agent's ServiceAccount token
// through /proc/AGENT/root and the Keystone credentials from its memory.
// The programs the agent starts are dumpable again (execve resets it), so
// its own checks still read their /proc.
func notDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
