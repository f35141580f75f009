package logs

import (
	"context"
	"fmt"
)

// ForwardSink ships records through a Forward client, one entry per
// record: message (bin: invalid UTF-8 passes through as the bytes it is),
// file, offset (the end of the record in its file), id (device:inode:head,
// which with offset lets a receiver drop the duplicates at-least-once
// delivery can make), partial for a piece of an over-long line, and the
// pod's pod, namespace and container when known.
type ForwardSink struct {
	F                         *Forward
	Pod, Namespace, Container string
}

func (s *ForwardSink) Send(ctx context.Context, tag string, recs []Record) error {
	entries := make([]Entry, len(recs))
	for i, r := range recs {
		fields := []Field{
			{"message", r.Data},
			{"file", r.File.Path},
			{"offset", r.End},
			{"id", fmt.Sprintf("%d:%d:%s", r.File.Dev, r.File.Ino, r.File.Head)},
		}
		if r.Partial {
			fields = append(fields, Field{"partial", true})
		}
		for _, kv := range [][2]string{{"pod", s.Pod}, {"namespace", s.Namespace}, {"container", s.Container}} {
			if kv[1] != "" {
				fields = append(fields, Field{kv[0], kv[1]})
			}
		}
		entries[i] = Entry{Fields: fields}
	}
	return s.F.Send(ctx, tag, entries)
}
