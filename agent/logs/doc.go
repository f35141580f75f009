// Package logs ships the service's log files to the logging sidecar.
//
// A Shipper tails the files (through rotation and copytruncate), groups
// their lines into records (an oslo.log traceback is one), and hands them
// in batches to a Sink: a ForwardSink, Syslog or Stdout. It commits a
// file's offset only once the sink has acknowledged what is before it, so
// a crash or a sink that is down costs duplicates, never lines; when its
// context ends it drains what is there within ShipperConfig.Drain.
// ShipperConfig.Fields are added to every record, and an Observer hears
// of every batch shipped and of failures.
//
// Forward is the Fluent forward protocol (v1) client: PackedForward
// messages with the chunk option, acked one by one, several in flight over
// one connection, resent over a new connection when the connection breaks
// or an ack does not come, and split when a chunk is never acked; optional
// shared-key handshake and TLS. The MessagePack it needs is written by
// hand (msgpack.go).
package logs
