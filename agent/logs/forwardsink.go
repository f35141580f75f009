package logs

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ForwardSink ships records through a Forward client, one entry per
// record: message (bin: invalid UTF-8 passes through as the bytes it is),
// file, offset (the end of the record in its file), id (device:inode:head,
// which with offset lets a receiver drop the duplicates at-least-once
// delivery can make), partial for a piece of an over-long line, then the
// fields Send is given (ShipperConfig.Fields), in the order of their keys.
// Pod, Namespace and Container, when set, are sent as pod, namespace and
// container, unless the fields have that key.
type ForwardSink struct {
	F                         *Forward
	Pod, Namespace, Container string

	mu   sync.Mutex
	free []*packBuf // buffers of Sends that have returned
}

// packBuf is one Send's encoding: the entries, back to back, and where
// each starts.
type packBuf struct {
	body []byte
	offs []int
}

// maxFree bounds the buffers kept for the next Sends.
const maxFree = 4

// Send encodes the records straight into the PackedForward body (no Entry
// per record) and sends it with Forward.Send's guarantees. It is safe for
// concurrent use.
func (s *ForwardSink) Send(ctx context.Context, tag string, fields map[string]string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	b := s.get()
	defer s.put(b)
	extra, nExtra := s.extra(fields)
	now := time.Now()
	var id []byte
	var idOf Position
	// Grown once to what the entries take, not step by step.
	size := 0
	for i := range recs {
		size += len(recs[i].Data) + len(recs[i].File.Path) + len(extra) + 96
	}
	body, offs := slices.Grow(b.body[:0], size), slices.Grow(b.offs[:0], len(recs)+1)
	offs = append(offs, 0)
	for i := range recs {
		r := &recs[i]
		if id == nil || !sameIdentity(r.File, idOf) {
			id = appendID(id[:0], r.File)
			idOf = r.File
		}
		n := 4 + nExtra
		if r.Partial {
			n++
		}
		body = appendEventTime(append(body, 0x92), now)
		body = appendMap(body, n)
		body = appendBin(appendStr(body, "message"), r.Data)
		body = appendStr(appendStr(body, "file"), r.File.Path)
		body = appendInt(appendStr(body, "offset"), r.End)
		body = appendStrBytes(appendStr(body, "id"), id)
		if r.Partial {
			body = appendBool(appendStr(body, "partial"), true)
		}
		body = append(body, extra...)
		offs = append(offs, len(body))
	}
	b.body, b.offs = body, offs
	return s.F.send(ctx, tag, body, offs)
}

// appendID appends the id of file p: device:inode:head.
func appendID(b []byte, p Position) []byte {
	b = strconv.AppendUint(b, p.Dev, 10)
	b = strconv.AppendUint(append(b, ':'), p.Ino, 10)
	return append(append(b, ':'), p.First...)
}

// extra encodes the key/value pairs every record of a Send gets.
func (s *ForwardSink) extra(fields map[string]string) ([]byte, int) {
	var b []byte
	n := 0
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		b = appendStr(appendStr(b, k), fields[k])
		n++
	}
	for _, kv := range [...][2]string{{"pod", s.Pod}, {"namespace", s.Namespace}, {"container", s.Container}} {
		if _, ok := fields[kv[0]]; !ok && kv[1] != "" {
			b = appendStr(appendStr(b, kv[0]), kv[1])
			n++
		}
	}
	return b, n
}

func (s *ForwardSink) get() *packBuf {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b
	}
	return &packBuf{}
}

// put keeps b for the next Send: Forward.send no longer holds it once it
// has returned.
func (s *ForwardSink) put(b *packBuf) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) < maxFree {
		s.free = append(s.free, b)
	}
}
