package logs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// encodeValue encodes what decode returns, with the package's encoder
// (map keys sorted, so the bytes are canonical).
func encodeValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return appendNil(b)
	case bool:
		return appendBool(b, v)
	case int:
		return appendInt(b, int64(v))
	case int64:
		return appendInt(b, v)
	case uint64:
		return appendUint(b, v)
	case string:
		return appendStr(b, v)
	case []byte:
		return appendBin(b, v)
	case msgExt:
		return appendExt(b, v.Type, v.Data)
	case []any:
		b = appendArray(b, len(v))
		for _, e := range v {
			b = encodeValue(b, e)
		}
		return b
	case map[string]any:
		b = appendMap(b, len(v))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = encodeValue(appendStr(b, k), v[k])
		}
		return b
	}
	panic("encodeValue: unsupported type")
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The expected bytes follow the msgpack spec's formats.
func TestEncode(t *testing.T) {
	s31, s32 := strings.Repeat("x", 31), strings.Repeat("x", 32)
	s256 := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name string
		got  []byte
		want string // hex of the header (and the value when short)
	}{
		{"nil", appendNil(nil), "c0"},
		{"false", appendBool(nil, false), "c2"},
		{"true", appendBool(nil, true), "c3"},
		{"0", appendInt(nil, 0), "00"},
		{"127", appendInt(nil, 127), "7f"},
		{"128", appendInt(nil, 128), "cc80"},
		{"255", appendUint(nil, 255), "ccff"},
		{"256", appendUint(nil, 256), "cd0100"},
		{"65536", appendUint(nil, 65536), "ce00010000"},
		{"2^32", appendUint(nil, 1<<32), "cf0000000100000000"},
		{"maxuint64", appendUint(nil, math.MaxUint64), "cfffffffffffffffff"},
		{"-1", appendInt(nil, -1), "ff"},
		{"-32", appendInt(nil, -32), "e0"},
		{"-33", appendInt(nil, -33), "d0df"},
		{"-128", appendInt(nil, -128), "d080"},
		{"-129", appendInt(nil, -129), "d1ff7f"},
		{"-32769", appendInt(nil, -32769), "d2ffff7fff"},
		{"minint64", appendInt(nil, math.MinInt64), "d38000000000000000"},
		{"fixstr", appendStr(nil, "ab"), "a26162"},
		{"fixstr 31", appendStr(nil, s31)[:1], "bf"},
		{"str8", appendStr(nil, s32)[:2], "d920"},
		{"str16", appendStr(nil, s256)[:3], "da0100"},
		{"bin8", appendBin(nil, []byte{1, 2}), "c4020102"},
		{"bin16", appendBin(nil, make([]byte, 256))[:3], "c50100"},
		{"bin32", appendBinHeader(nil, 1<<16), "c600010000"},
		{"fixarray", appendArray(nil, 15), "9f"},
		{"array16", appendArray(nil, 16), "dc0010"},
		{"array32", appendArray(nil, 1<<16), "dd00010000"},
		{"fixmap", appendMap(nil, 2), "82"},
		{"map16", appendMap(nil, 16), "de0010"},
		{"fixext1", appendExt(nil, 5, []byte{9}), "d40509"},
		{"fixext16", appendExt(nil, -1, make([]byte, 16))[:2], "d8ff"},
		{"ext8", appendExt(nil, 1, []byte{1, 2, 3}), "c70301010203"},
		{"ext16", appendExt(nil, 1, make([]byte, 300))[:4], "c8012c01"},
		{"eventtime", appendEventTime(nil, time.Unix(1500000000, 123456789)), "d700 59682f00 075bcd15"},
		{"eventtime before 1970", appendEventTime(nil, time.Unix(-5, 0)), "d700 00000000 00000000"},
	} {
		if want := unhex(t, tc.want); !bytes.Equal(tc.got, want) {
			t.Errorf("%s: got % x, want % x", tc.name, tc.got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{"c0", nil},
		{"c3", true},
		{"c2", false},
		{"05", int64(5)},
		{"ff", int64(-1)},
		{"d0df", int64(-33)},
		{"d1ff7f", int64(-129)},
		{"d2ffff7fff", int64(-32769)},
		{"d38000000000000000", int64(math.MinInt64)},
		{"cc80", int64(128)},
		{"cd0100", int64(256)},
		{"ce00010000", int64(65536)},
		{"cf7fffffffffffffff", int64(math.MaxInt64)},
		{"cfffffffffffffffff", uint64(math.MaxUint64)},
		{"a26162", "ab"},
		{"d9026162", "ab"},
		{"da00026162", "ab"},
		{"db000000026162", "ab"},
		{"c4020102", []byte{1, 2}},
		{"c500020102", []byte{1, 2}},
		{"c6000000020102", []byte{1, 2}},
		{"c400", []byte{}},
		{"92 01 a161", []any{int64(1), "a"}},
		{"dc0001 c0", []any{nil}},
		{"dd00000001 c0", []any{nil}},
		{"81 a3616b6b a26869", map[string]any{"akk": "hi"}},
		{"de0001 a161 01", map[string]any{"a": int64(1)}},
		{"df00000001 a161 01", map[string]any{"a": int64(1)}},
		{"d70059682f00075bcd15", msgExt{0, unhex(t, "59682f00075bcd15")}},
		{"c70301010203", msgExt{1, []byte{1, 2, 3}}},
		{"c8000101ff", msgExt{1, []byte{0xff}}},
		{"c900000001 01ff", msgExt{1, []byte{0xff}}},
		// An ack and a HELO as fluentd sends them (nonce as bin).
		{"81 a361636b b8 " + hex.EncodeToString([]byte("AAAAAAAAAAAAAAAAAAAAAA==")),
			map[string]any{"ack": "AAAAAAAAAAAAAAAAAAAAAA=="}},
		{"92 a448454c4f 83 a56e6f6e6365 c40201ff a461757468 a0 a96b656570616c697665 c3",
			[]any{"HELO", map[string]any{"nonce": []byte{1, 0xff}, "auth": "", "keepalive": true}}},
	} {
		in := unhex(t, tc.in)
		got, n, err := decode(in)
		if err != nil || n != len(in) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("decode(%s) = %#v, %d, %v; want %#v, %d", tc.in, got, n, err, tc.want, len(in))
		}
		// A value followed by more bytes takes only its own.
		if _, n, err := decode(append(in, 0xc0)); err != nil || n != len(in) {
			t.Errorf("decode(%s c0): took %d, %v", tc.in, n, err)
		}
		// Every truncation is short, never a panic or another error.
		for i := range len(in) {
			if _, _, err := decode(in[:i]); err != errShort {
				t.Errorf("decode(%s[:%d]): %v, want errShort", tc.in, i, err)
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	deep := strings.Repeat("91", maxDepth+1) + "c0"
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"c1", errType},
		{"ca00000000", errType},                      // float32
		{"cb0000000000000000", errType},              // float64
		{"81 01 02", errKey},                         // int key
		{"81 c403616263 01", errKey},                 // bin key
		{deep, errDepth},                             // nested too deep
		{strings.Repeat("91", maxDepth) + "c0", nil}, // just deep enough
	} {
		_, _, err := decode(unhex(t, tc.in))
		if err != tc.want {
			t.Errorf("decode(%s): %v, want %v", tc.in, err, tc.want)
		}
	}
}

// Headers that claim more than the input holds are short before anything is
// allocated for them.
func TestDecodeBounds(t *testing.T) {
	for _, in := range []string{
		"dd ffffffff 00 00",    // array of 4G elements
		"df ffffffff 00 00",    // map of 4G pairs
		"81 a0",                // map of 1 pair with 1 byte left
		"db ffffffff 61",       // str of 4G bytes
		"c6 ffffffff 61",       // bin of 4G bytes
		"c9 ffffffff 01 61",    // ext of 4G bytes
		"92 dd ffffffff c0 c0", // nested
	} {
		b := unhex(t, in)
		allocs := testing.AllocsPerRun(10, func() {
			if _, _, err := decode(b); err != errShort {
				t.Errorf("decode(%s): %v, want errShort", in, err)
			}
		})
		if allocs > 2 {
			t.Errorf("decode(%s): %v allocations", in, allocs)
		}
	}
}

func TestMsgReader(t *testing.T) {
	var stream []byte
	var want []any
	for i := range 200 {
		v := map[string]any{"ack": strings.Repeat("c", i), "n": int64(i)}
		want = append(want, v)
		stream = encodeValue(stream, v)
	}
	// One byte per Read: every value is decoded across many reads.
	r := &msgReader{r: iotest.OneByteReader(bytes.NewReader(stream)), max: 1024}
	for i, w := range want {
		v, err := r.next()
		if err != nil || !reflect.DeepEqual(v, w) {
			t.Fatalf("value %d: %v, %v", i, v, err)
		}
	}
	if _, err := r.next(); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}

	// Truncated in a value: ErrUnexpectedEOF.
	r = &msgReader{r: bytes.NewReader(stream[:5]), max: 1024}
	if _, err := r.next(); err != io.ErrUnexpectedEOF {
		t.Errorf("truncated: %v", err)
	}
	// A value over max is an error, after reading no more than max bytes.
	big := encodeValue(nil, strings.Repeat("x", 2000))
	cr := &msgCountingReader{r: bytes.NewReader(big)}
	r = &msgReader{r: cr, max: 1024}
	if _, err := r.next(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("oversized: %v", err)
	}
	if cr.n > 1024 || len(r.b) > 1024 {
		t.Errorf("oversized: read %d bytes into a buffer of %d", cr.n, len(r.b))
	}
}

type msgCountingReader struct {
	r io.Reader
	n int
}

func (c *msgCountingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
