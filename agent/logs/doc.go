// Package logs ships the service's log files to the logging sidecar.
//
// Forward is the Fluent forward protocol (v1) client: PackedForward
// messages with the chunk option, acked one by one, several in flight over
// one connection, resent over a new connection when the connection breaks
// or an ack does not come, and split when a chunk is never acked; optional
// shared-key handshake and TLS. The MessagePack it needs is written by
// hand (msgpack.go).
package logs
