package logs

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// FuzzDecode: decode never panics and never claims more bytes than it was
// given; what it decodes encodes to bytes that decode to the same value,
// and that encoding is stable.
func FuzzDecode(f *testing.F) {
	for _, v := range []any{
		nil, true, int64(-1), int64(1 << 40), uint64(1 << 63), "ack",
		[]byte{0x92, 0xd7}, msgExt{0, make([]byte, 8)}, msgExt{-3, make([]byte, 300)},
		map[string]any{"ack": "AAAAAAAAAAAAAAAAAAAAAA=="},
		[]any{"HELO", map[string]any{"nonce": []byte("0123456789abcdef"), "auth": "", "keepalive": true}},
		[]any{"PONG", true, "", "server", "ab12"},
	} {
		f.Add(encodeValue(nil, v))
	}
	// A PackedForward message as Send writes it.
	e := appendEventTime(append([]byte(nil), 0x92), time.Unix(1700000000, 5))
	e = appendStr(appendBin(appendStr(appendMap(e, 2), "message"), []byte("line\xff")), "offset")
	e = appendUint(e, 1<<33)
	msg := appendBin(appendStr(append([]byte(nil), 0x93), "kolla.keystone"), e)
	f.Add(appendInt(appendStr(appendStr(appendStr(appendMap(msg, 2), "chunk"), "x"), "size"), 1))
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0})
	f.Add([]byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0})

	f.Fuzz(func(t *testing.T, in []byte) {
		v, n, err := decode(in)
		if n < 0 || n > len(in) {
			t.Fatalf("decode took %d of %d bytes", n, len(in))
		}
		if err != nil {
			return
		}
		b := encodeValue(nil, v)
		v2, n2, err := decode(b)
		if err != nil || n2 != len(b) {
			t.Fatalf("re-encoded % x: %v, took %d of %d", b, err, n2, len(b))
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip: %#v became %#v", v, v2)
		}
		if b2 := encodeValue(nil, v2); !bytes.Equal(b, b2) {
			t.Fatalf("encoding not stable: % x then % x", b, b2)
		}
		// Packed entries inside a bin decode the same way (the receiver in
		// the tests does that).
		if p, ok := v.([]byte); ok {
			for len(p) > 0 {
				_, n, err := decode(p)
				if err != nil {
					break
				}
				p = p[n:]
			}
		}
	})
}
