// Package keystone runs the real OpenStack Keystone (Debian's python3-keystone)
// under uWSGI on loopback, for tests of the agent's probes, supervision and
// log shipping against a real OpenStack API service.
//
// Prepare writes a self-contained configuration under a directory (SQLite
// database, fernet and credential key repositories, log file) and runs
// keystone-manage to set it up; it takes seconds, so a test package does it
// once and shares the Instance. Command and Env give the uWSGI command line
// that serves keystone's public WSGI application on 127.0.0.1:PORT the way
// kolla-ansible configures it (service-uwsgi-config's uwsgi.ini), so a test can
// hand it to `kolla-agent run --`; Start runs it as a child of the test
// instead, in its own process group, and kills the group when the test ends.
//
// Nothing is read from /etc/keystone: keystone-wsgi-public finds its
// configuration through OS_KEYSTONE_CONFIG_DIR (keystone/server/flask/core.py,
// _get_config_files), keystone-manage gets --config-file, and both get an
// explicit, empty --config-dir so oslo.config does not search its default
// keystone.conf.d directories; every other path option that defaults under
// /etc/keystone and matters here is set to a path under the directory.
//
// Two facts the probe tests rely on, checked by this package's tests:
//
//   - uWSGI serves HTTP through a separate router process ("uWSGI http 1",
//     kolla's `http =` option) that forwards to the workers; the master takes no
//     part in a request. SIGSTOP to the master alone leaves /v3 answering.
//     To make keystone stop answering, stop the whole process group
//     (Server.SignalGroup, or kill(-pgid, SIGSTOP)).
//   - With --die-on-term and kolla's `hook-master-start = unix_signal:15
//     gracefully_kill_them_all`, SIGTERM to the master ends every process of
//     the group within a few seconds, and the master exits 0 (workers may log
//     a segmentation fault in greenlet while Python finalizes; harmless).
//     Either option alone has the same effect (uWSGI 2.0.21); with neither,
//     uWSGI reloads on SIGTERM (the master stays, workers are respawned).
//     But a SIGTERM that arrives while a worker is still loading keystone
//     (--lazy-apps) is lost on that worker: the master then waits the whole
//     --worker-reload-mercy (80 s) before it SIGKILLs it and exits 0. Wait
//     for every worker to load (Server.WaitReady) before stopping keystone.
//
// The Debian binaries are used by absolute path: their Python modules are for
// /usr/bin/python3 only, and the python3 first on a developer's PATH may be
// another interpreter. hack/install-tools.sh installs them (python3-keystone,
// uwsgi-core, uwsgi-plugin-python3); a missing one is an error, not a skip.
package keystone
