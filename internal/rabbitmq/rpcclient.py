"""One oslo.messaging RPC call, as an exec probe makes it (the baseline of
the rpc check's benchmark).

    rpcclient.py --config-file F --topic T --server S --method M [--timeout N]

Exits 0 when the server answers: with a result, or with NoSuchMethod (the
method does not exist, but the server is alive); 1 otherwise.
"""

import argparse
import os
import sys

from oslo_config import cfg
import oslo_messaging


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--timeout", type=int, default=10)
    args = parser.parse_args()

    conf = cfg.CONF
    conf(["--config-file", args.config_file], project="rpcclient")
    transport = oslo_messaging.get_rpc_transport(conf)
    target = oslo_messaging.Target(topic=args.topic, server=args.server)
    client = oslo_messaging.get_rpc_client(transport, target,
                                           timeout=args.timeout)
    code = 0
    try:
        print(client.call({}, args.method))
    except oslo_messaging.rpc.client.RemoteError as e:
        if e.exc_type not in ("NoSuchMethod", "UnsupportedVersion"):
            print(e, file=sys.stderr)
            code = 1
    except Exception as e:  # the exec probe's view: any failure fails
        print("%s: %s" % (type(e).__name__, e), file=sys.stderr)
        code = 1
    transport.cleanup()
    return code


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: a thread oslo.messaging leaves behind holds the
    # interpreter's exit for ~10s (idle, costing no CPU).
    os._exit(code)
