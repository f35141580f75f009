package redact

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Handler wraps h so that every record it writes has its message and
// attribute values passed through Text, and the value of an attribute named
// like a secret hidden whole: a log line is an output like any other.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(handler); ok {
		return h
	}
	return handler{h}
}

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(Attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = Attr(a)
	}
	return handler{h.next.WithAttrs(red)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

// sprint formats x as slog's handlers would, and as they do, survives a
// nil pointer whose method panics.
func sprint(x any) (s string) {
	defer func() {
		if recover() != nil {
			s = "<nil>"
		}
	}()
	return fmt.Sprintf("%+v", x)
}

// Args is a command line with the value of every secret-named flag hidden:
// --password=x and --password x (the next word) alike.
func Args(argv []string) []string {
	out := make([]string, len(argv))
	for i, w := range argv {
		out[i] = Text(w)
		if i > 0 && strings.HasPrefix(argv[i-1], "-") && !strings.Contains(argv[i-1], "=") && SecretName(argv[i-1]) && !strings.HasPrefix(w, "-") {
			out[i] = Mask
		}
	}
	return out
}

// Attr returns a with its value redacted.
func Attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	if SecretName(a.Key) && v.Kind() != slog.KindGroup {
		return slog.String(a.Key, Mask)
	}
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = Attr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case []string:
			return slog.Any(a.Key, Args(x))
		case []byte:
			return slog.String(a.Key, Text(string(x)))
		case error, fmt.Stringer:
			return slog.String(a.Key, Text(sprint(x)))
		default:
			// A map or struct the handler would print: only when it holds
			// something to hide does it become its redacted text.
			s := sprint(x)
			if r := Text(s); r != s {
				return slog.String(a.Key, r)
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
