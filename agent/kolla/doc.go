// Package kolla is kolla's side of a kolla container: config.json (or
// config.yaml) put in place as kolla_set_configs does (config.go, plan.go,
// apply.go, fs.go), and what kolla's start.sh does between that and the
// exec of the service, which kolla images rely on: /run_command, the custom
// CA certificates and the image's kolla_extend_start hook (start.go).
// Output joins kolla's plan with agent.yaml's templates (agent/render).
//
// # config.json
//
// Find and Load read config.json (or config.yaml) from the
// ConfigMap kolla-kubernetes mounts at /var/lib/kolla/config_files;
// NewPlan resolves it against the container's filesystem; the plan's
// Apply, Check and Changes are kolla_set_configs, kolla_set_configs --check,
// and a dry run.
//
// What it guarantees:
//
//   - A config that loads is well formed: unknown or repeated fields, fields
//     of the wrong type, a perm that is not octal, an owner that is not
//     "user", "user:" or "user:group", an exclude that is not a regular
//     expression, a relative path, are errors naming the file, the entry and
//     the field (config.json: config_files[3].perm: ...). Every problem is
//     reported, not just the first.
//   - All or nothing: NewPlan looks up every owner in the image's
//     /etc/passwd and /etc/group, expands every source, reads every file to
//     copy, resolves every destination and permission path, and computes the
//     result; on any problem it returns an error naming the entry and field,
//     and nothing on disk has changed. Apply then writes each file to a
//     temporary file in its directory, sets owner and mode, fsyncs and
//     renames it into place; if a step fails (a full disk), what was done is
//     undone and the error says so. The one exception is kolla's: owner or
//     mode on a path only permissions name, refused by its filesystem (NFS
//     with root_squash, a read-only mount), is logged and skipped.
//   - Nothing is read or written outside the root: symlinks are resolved as
//     if the root were "/", and a destination, source or permission path that
//     climbs above it through ".." or a symlink is an error. A symlink at a
//     destination is replaced, not written through.
//   - kolla's semantics: sources are Python globs ("*" skips dot files); a
//     dest ending in "/" receives each source under its own name; without
//     merge the destination is replaced, with merge a directory is merged
//     into the existing one; directories are copied recursively and get the
//     execute bit wherever their mode has read; preserve_properties keeps
//     each source's mode and owner (and, with merge, copies a symlink as a
//     symlink); permissions set owner (and mode) on every match of the glob
//     and, with recurse, below it. The image's default file at a destination
//     is saved under the state directory the first time a config replaces
//     it and put back when a later config no longer lists it; COPY_ONCE
//     copies at the first start only and then leaves a marker.
//   - Check compares content, mode and owner with what would be rendered and
//     lists every difference.
//   - Applying an unchanged config changes nothing on disk (no rewrite, no
//     mtime change).
//
// Where it deliberately differs from kolla:
//
//   - perm "600" is octal 0600 (kolla reads decimal 600), "2775" works
//     (kolla fails), and a JSON number or a "true" string is rejected rather
//     than misread.
//   - Check does not report a perm written "600", a preserve_properties
//     entry or a directory source with subdirectories as bad, and it looks
//     at permissions' effects on rendered files. It does not compare the
//     command (the agent execs it; there is no /run_command).
//   - In permissions.exclude any matching regex excludes (kolla changes a
//     path once per regex that does not match it). Regexes are Go's RE2.
//     Below a recursive match, symlinks get their own owner and are never
//     followed.
//   - The kubelet's ..data link and ..<timestamp> directories inside a
//     directory source are not copied; sources are read through one view of
//     ..data, so a render never mixes two ConfigMap versions.
//   - A glob's matches are processed in sorted order; a symlink loop in a
//     source, a copy into its own source, or a destination over the state
//     directory is an error.
//   - directories[] and files[] (create if missing, then set owner and
//     mode) are the agent's additions: kolla has no such sections.
//   - Backups keep symlinks as symlinks and cover every glob match (kolla
//     saves nothing for a globbed source).
//
// What it does not do: it keeps no file's timestamps; it holds every file it
// writes in memory (ConfigMaps are at most 1 MiB); a ConfigMap swapped while
// a plan reads it can make NewPlan fail (run it again); COPY_ONCE only
// survives a container restart when the state directory is on a volume; it
// does not read kolla's own /etc/kolla/defaults.
package kolla
