"""A minimal oslo.service service for the reload tests.

Run with Debian's /usr/bin/python3 (python3-oslo.service, python3-oslo.config):

    python3 -I THIS_FILE --config-file F --status-file S [--restart-method M]

M is oslo.service's restart_method: mutate (the default) or reload.

It registers two options in [DEFAULT], read from F by oslo.config:

  greeting  mutable=True: a SIGHUP with restart_method 'mutate' applies it
  color     immutable: 'mutate' keeps the old value (oslo.config logs
            "Ignoring change to immutable option"); 'reload' takes it

and is launched the way OpenStack services are, with
oslo_service.service.launch(conf, svc, workers=1, restart_method=...): one
worker gives a ServiceLauncher, which runs the service in this process. On
SIGHUP, when oslo.service considers the process a daemon, the launcher
re-reads F (mutate_config_files or reload_config_files) and calls reset() on
the service; with 'reload' it also stops and starts it again, in this process.

Every report rewrites S atomically with one JSON object (pid, process group,
whether oslo.service thinks it is a daemon, the options' current values, how
many times start() and reset() ran, what the last mutation changed) and prints
"greeting=<value>" on stdout. It reports on start() and on reset().
"""

import os

# Before eventlet is imported (oslo_service imports it): no green DNS
# resolver, so dnspython is not loaded. Nothing here resolves names; it saves
# about a tenth of a second of start-up.
os.environ.setdefault("EVENTLET_NO_GREENDNS", "yes")

import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402

from eventlet import greenthread  # noqa: E402
from eventlet import hubs  # noqa: E402
from oslo_config import cfg  # noqa: E402
from oslo_service import service  # noqa: E402

OPTS = [
    cfg.StrOpt("greeting", default="hello", mutable=True,
               help="Reported on start and after every reload."),
    cfg.StrOpt("color", default="blue",
               help="Immutable: a mutate reload keeps the old value."),
]

CLI_OPTS = [
    cfg.StrOpt("status-file", required=True,
               help="Rewritten (JSON) on every report."),
    cfg.StrOpt("restart-method", default="mutate",
               choices=["mutate", "reload"],
               help="oslo.service's restart_method."),
]


class GreetingService(service.Service):
    def __init__(self, conf):
        super().__init__()
        self.conf = conf
        self.starts = 0
        self.resets = 0
        self.changed = []
        conf.register_mutate_hook(self._mutated)
        # A pipe nobody writes to, watched by a green thread while the
        # service runs. Without a file descriptor to watch, eventlet's hub
        # waits in time.sleep(60) rather than epoll: a signal's handler runs
        # at once but only spawns a green thread, and the sleep resumes
        # (PEP 475; oslo.service's EINTR trick only recognises its own sleep
        # wrapper, which this eventlet's poll hub does not call), so SIGHUP
        # and SIGTERM would take effect up to 60 s late. A real service
        # always has sockets (RPC, its API) for the hub to poll.
        self._idle_r, self._idle_w = os.pipe()

    def _idle(self):
        hubs.trampoline(self._idle_r, read=True)

    def _tick(self):
        # A timer every second, as a real service's heartbeats and
        # periodic tasks are: it bounds how late the hub sees a signal
        # handled just before it polls (the race in osloservice.go's
        # package doc).
        while True:
            greenthread.sleep(1)

    def _mutated(self, conf, fresh):
        # Called by ConfigOpts.mutate_config_files with
        # {(group or None, name): (old, new)} for the mutable options that
        # changed; reset() follows.
        self.changed = sorted("%s.%s" % (g or "DEFAULT", n) for g, n in fresh)

    def start(self):
        super().start()
        self.tg.add_thread(self._idle)
        self.tg.add_thread(self._tick)
        self.starts += 1
        self.report("start")

    def reset(self):
        super().reset()
        self.resets += 1
        self.report("reset")

    def report(self, event):
        try:
            daemon = service._is_daemon()
        except Exception:  # a private helper: never let it break a report
            daemon = None
        status = {
            "event": event,
            "pid": os.getpid(),
            "pgrp": os.getpgrp(),
            "daemon": daemon,
            "greeting": self.conf.greeting,
            "color": self.conf.color,
            "starts": self.starts,
            "resets": self.resets,
            "changed": self.changed,
            "restart_method": self.conf.restart_method,
        }
        # stdout first: whoever sees the status may read stdout at once.
        print("greeting=%s" % status["greeting"], flush=True)
        path = self.conf.status_file
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(status, f)
            f.write("\n")
        os.replace(tmp, path)


def main():
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    conf = cfg.ConfigOpts()
    conf.register_opts(OPTS)
    conf.register_cli_opts(CLI_OPTS)
    # Only the files given: no search of /etc or ~, no OS_* environment.
    conf(sys.argv[1:], project="osloservice-test",
         default_config_files=[], default_config_dirs=[], use_env=False)
    svc = GreetingService(conf)
    launcher = service.launch(conf, svc, workers=1,
                              restart_method=conf.restart_method)
    launcher.wait()


if __name__ == "__main__":
    main()
