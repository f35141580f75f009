// A Fluent forward server for tests: @fluent-org/logger's FluentServer on
// loopback, which writes every entry it receives to a file as one JSON line.
//
// Usage: node server.js CONFIG, where CONFIG is a JSON object:
//   module          absolute directory of the installed @fluent-org/logger
//   host            address to listen on; default 127.0.0.1 (a pod's
//                   receiver: 0.0.0.0, for the kubelet's probe)
//   port            TCP port; 0 picks a free one
//   output          file the entries are appended to
//   sharedKey       optional: require the shared-key handshake
//   serverHostname  the hostname sent in HELO's PONG (with sharedKey)
//   tlsCert, tlsKey optional PEM files: serve TLS
//
// Once listening it prints "listening PORT" on stdout. Each entry becomes
//   {"tag": T, "time": [sec, nsec] | number, "record": {...},
//    "chunk": C, "mode": M}
// where time is [sec, nsec] for an EventTime and the number otherwise, chunk
// is the message's chunk option ("" without), and mode is the transport
// mode: Message, Forward, PackedForward or CompressedPackedForward. A
// msgpack bin value in a record is written as {"$bin": "<base64>"}.
//
// FluentServer writes the ack ({"ack": chunk}) to the socket before it
// passes the entries to onEntry, and onEntry is not told the chunk. So the
// entries are written here from the parsed message instead, by wrapping the
// protocol module's parseTransport, which the server calls once per message
// right before it acks: every acked entry is in the file before its ack
// leaves.
"use strict";

const fs = require("fs");
const path = require("path");

const config = JSON.parse(process.argv[2]);
const logger = require(config.module);
const protocol = require(path.join(config.module, "build", "src", "protocol"));
const EventTime = logger.EventTime;

const out = fs.openSync(config.output, "a");

function log(msg) {
  process.stderr.write(`forwardserver: ${msg}\n`);
}

// plain turns decoded msgpack into what JSON can carry.
function plain(v) {
  if (v instanceof Uint8Array) {
    return {$bin: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64")};
  }
  if (Array.isArray(v)) {
    return v.map(plain);
  }
  if (typeof v === "bigint") {
    return v.toString();
  }
  if (v !== null && typeof v === "object") {
    const o = {};
    for (const k of Object.keys(v)) {
      o[k] = plain(v[k]);
    }
    return o;
  }
  return v;
}

// modeOf names the transport mode of a message parseTransport accepted.
function modeOf(m) {
  if (typeof m[1] === "number" || m[1] instanceof EventTime) {
    return "Message";
  }
  if (Array.isArray(m[1])) {
    return "Forward";
  }
  if (m[2] && m[2].compressed === "gzip") {
    return "CompressedPackedForward";
  }
  return "PackedForward";
}

const parseTransport = protocol.parseTransport;
protocol.parseTransport = message => {
  const parsed = parseTransport(message);
  const mode = modeOf(message);
  const chunk = parsed.chunk || "";
  let lines = "";
  for (const [time, record] of parsed.entries) {
    lines += JSON.stringify({
      tag: parsed.tag,
      time: time instanceof EventTime ? [time.epoch, time.nano] : time,
      record: plain(record),
      chunk,
      mode,
    }) + "\n";
  }
  // One write(2) for the message: its lines land together, before the ack.
  if (lines) {
    fs.writeSync(out, lines);
  }
  return parsed;
};

// The server silently closes a connection on anything it does not accept;
// these wrappers log why.
const isClientTransportMessage = protocol.isClientTransportMessage;
protocol.isClientTransportMessage = message => {
  const ok = isClientTransportMessage(message);
  if (!ok) {
    log(`rejected message (connection closed): ${JSON.stringify(plain(message)).slice(0, 300)}`);
  }
  return ok;
};
// Only called while the server waits for a PING (after its HELO).
const isPing = protocol.isPing;
protocol.isPing = message => {
  const ok = isPing(message);
  if (!ok) {
    log(`expected PING, got (connection closed): ${JSON.stringify(plain(message)).slice(0, 300)}`);
  }
  return ok;
};
const checkPing = protocol.checkPing;
protocol.checkPing = (...args) => {
  try {
    return checkPing(...args);
  } catch (e) {
    log(`PING rejected: ${e.message}`);
    throw e;
  }
};
const decodeClientStream = protocol.decodeClientStream;
protocol.decodeClientStream = async function* (socket) {
  try {
    yield* decodeClientStream(socket);
  } catch (e) {
    // Socket errors (with a syscall) are logged by the error listener.
    if (!e.syscall) {
      log(`${socket.remoteAddress}:${socket.remotePort}: ${e.message}`);
    }
    throw e;
  }
};

class Server extends logger.FluentServer {
  handleConnection(socket) {
    // FluentServer adds no "error" listener of its own; this one logs
    // socket errors and keeps any from going unhandled. An AbortError is
    // the stream's iterator destroying the socket when the server's read
    // loop ends early (after a rejection): no news.
    socket.on("error", e => {
      if (e.name !== "AbortError") {
        log(`${socket.remoteAddress}:${socket.remotePort}: ${e.message}`);
      }
    });
    return super.handleConnection(socket);
  }
}

const options = {listenOptions: {host: config.host || "127.0.0.1", port: config.port || 0}};
if (config.sharedKey) {
  options.security = {
    serverHostname: config.serverHostname,
    sharedKey: config.sharedKey,
    authorize: false,
    userDict: {},
  };
}
if (config.tlsCert) {
  options.tlsOptions = {
    cert: fs.readFileSync(config.tlsCert),
    key: fs.readFileSync(config.tlsKey),
  };
}

// As a container's PID 1 the default action of SIGTERM does not apply: end
// on it, as a log receiver stopped by the kubelet does.
process.on("SIGTERM", () => process.exit(0));

const server = new Server(options);
server.listen().then(() => {
  process.stdout.write(`listening ${server.port}\n`);
});
