"""A real oslo.messaging RPC server for the rpc check's tests.

Run with Debian's /usr/bin/python3, which has python3-oslo.messaging:

    rpcserver.py --config-file F --topic T --server S --ready PATH

F is an oslo config file ([DEFAULT] transport_url, control_exchange,
rpc_ping_enabled), read by oslo.config's global CONF as a service reads its
own. PATH is created once the server consumes (its queues and exchange
exist). SIGTERM stops the server gracefully.
"""

import argparse
import logging
import signal
import sys
import threading

from oslo_config import cfg
import oslo_messaging


class TestEndpoint(object):
    """Methods in the default namespace, version 1.0."""

    def echo(self, ctxt, **kwargs):
        return kwargs

    def fail(self, ctxt, **kwargs):
        raise ValueError("requested failure")


class BaseAPI(object):
    """Like nova's BaseAPI: a ping in namespace "baseapi", version 1.1."""

    target = oslo_messaging.Target(namespace="baseapi", version="1.1")

    def ping(self, ctxt, **kwargs):
        return {"service": "rpcserver", "arg": kwargs.get("arg")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--ready", required=True)
    args = parser.parse_args()

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    conf = cfg.CONF
    conf(["--config-file", args.config_file], project="rpcserver")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())

    transport = oslo_messaging.get_rpc_transport(conf)
    target = oslo_messaging.Target(topic=args.topic, server=args.server)
    server = oslo_messaging.get_rpc_server(
        transport, target, [TestEndpoint(), BaseAPI()], executor="threading")
    server.start()
    with open(args.ready, "w") as f:
        f.write("ready\n")

    while not stop.wait(0.2):
        pass
    server.stop()
    server.wait()
    transport.cleanup()


if __name__ == "__main__":
    main()
