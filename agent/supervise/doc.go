// Package supervise runs the service as a child of the agent and does what
// PID 1 of a container must: reap every zombie, forward signals, stop the
// service gracefully and report how it ended.
//
// # What Run guarantees
//
//   - The child is started in a new process group of its own (setpgid), in
//     the agent's session. There is no setsid, no TIOCSCTTY or TIOCNOTTY and no
//     tcsetpgrp: the agent never changes who owns a terminal, so the kernel
//     never sends the SIGHUP/SIGCONT that dumb-init's setsid mode let race
//     with the child's exec (Yelp/dumb-init#136, which broke kolla's nova
//     containers). The group exists before Run forwards its first signal:
//     the child joins it between fork and exec, and starting returns only
//     after the exec.
//   - The child inherits the agent's stdin, stdout and stderr as they are: no
//     pipes, no copying, no buffering.
//   - Environment: the child gets exactly Config.Env, nothing more. Nothing
//     is inherited from the agent's own environment; nil means an empty
//     environment; a variable set twice keeps its last value. The command
//     name is looked up in the PATH of Config.Env (the agent's own PATH plays
//     no part), or in DefaultPath when Config.Env has none.
//   - Config.Credential sets the child's uid, gid and supplementary groups
//     (an empty Groups clears them, as a privilege drop must). Use
//     LookupCredential to resolve names from the image's /etc/passwd and
//     /etc/group the way `sudo -u` does; HOME, USER and LOGNAME are the
//     caller's to put in Env, from the Identity's Name and Home.
//   - The signals in Config.Signals are forwarded to the child's process
//     group. SIGTERM starts the stop sequence instead, as Stop does and as
//     the cancellation of Run's context does: SIGTERM to the group once,
//     then SIGKILL to the group after Config.Grace. However the sequence is
//     started and however often, the group gets one SIGTERM.
//   - Every zombie is reaped: the agent's children, and every orphan the
//     kernel re-parents to it. As PID 1 that is every orphan of the
//     container; otherwise Run makes the agent a child subreaper, so the
//     orphans of the service's tree come to the agent all the same.
//   - When the service's main process ends on its own, what is left of its
//     process group goes the same way (SIGTERM, SIGKILL after Grace): the
//     container is ending anyway, and this way the leftovers are reaped
//     before Run returns.
//   - Run returns the child's exit code, or 128+N when signal N killed it,
//     never -1 or 255 for a signal. When err is not nil exitCode is what a
//     shell would report: 127 when the command is not found, 126 when it
//     cannot be executed, 1 otherwise.
//   - A failure to forward a signal or to reap an unrelated process is
//     logged, and supervision goes on: it never costs the service.
//
// # What it needs from the rest of the process
//
// Exactly one goroutine, the one in Run, owns every wait4(-1); it handles the
// main child's status itself. Nothing else in the process may wait for
// children while Run is running: no exec.Cmd.Run, Output or Wait, no second
// Supervisor. Two waiters race, and the loser gets ECHILD ("no child
// processes"). If the main child is reaped elsewhere, Run notices the ECHILD
// and returns an error rather than hanging.
//
// # What it does not do
//
//   - Processes that leave the group (setsid, setpgid) are not signalled.
//     Their zombies are still reaped while Run runs.
//   - With a terminal, the child's group is not the terminal's foreground
//     group: a service that reads the terminal gets SIGTTIN. Containers of a
//     pod normally have no terminal.
//   - The service is not restarted: Run returns when it ends.
package supervise
