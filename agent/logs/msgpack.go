package logs

// The small subset of MessagePack (github.com/msgpack/msgpack/blob/master/spec.md)
// the Fluent forward protocol needs, written by hand: linking
// github.com/tinylib/msgp v1.6.5 for the same few appends and reads added
// 102 KB to the stripped agent (measured; vmihailenco/msgpack/v5 costs four
// times that standalone), about twice the whole forward client, with the
// binary 130 KB under its 20 MB budget.

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"time"
)

func appendNil(b []byte) []byte { return append(b, 0xc0) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

// appendInt writes v in its shortest form; non-negative values use the
// unsigned forms, as most encoders do.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

//go:noinline
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// appendLen writes a length header: the fix form (fix|n) when n < fixMax,
// else the 8-bit form (when the type has one: c8 != 0), 16-bit or 32-bit.
//
//go:noinline
func appendLen(b []byte, n int, fix byte, fixMax int, c8, c16, c32 byte) []byte {
	switch {
	case n < fixMax:
		return append(b, fix|byte(n))
	case c8 != 0 && n <= math.MaxUint8:
		return append(b, c8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, c32), uint32(n))
}

//go:noinline
func appendStr(b []byte, s string) []byte {
	return append(appendLen(b, len(s), 0xa0, 32, 0xd9, 0xda, 0xdb), s...)
}

func appendStrBytes(b []byte, s []byte) []byte {
	return append(appendLen(b, len(s), 0xa0, 32, 0xd9, 0xda, 0xdb), s...)
}

func appendBinHeader(b []byte, n int) []byte { return appendLen(b, n, 0, 0, 0xc4, 0xc5, 0xc6) }

func appendBin(b []byte, p []byte) []byte { return append(appendBinHeader(b, len(p)), p...) }

func appendArray(b []byte, n int) []byte { return appendLen(b, n, 0x90, 16, 0, 0xdc, 0xdd) }

func appendMap(b []byte, n int) []byte { return appendLen(b, n, 0x80, 16, 0, 0xde, 0xdf) }

func appendExt(b []byte, typ int8, p []byte) []byte {
	switch len(p) {
	case 1, 2, 4, 8, 16:
		// fixext 1..16: 0xd4..0xd8.
		b = append(b, 0xd4+byte(bitsLen(len(p))))
	default:
		b = appendLen(b, len(p), 0, 0, 0xc7, 0xc8, 0xc9)
	}
	return append(append(b, byte(typ)), p...)
}

func bitsLen(n int) int {
	i := 0
	for n > 1 {
		n >>= 1
		i++
	}
	return i
}

// appendEventTime writes the forward protocol's EventTime: ext type 0 of 8
// bytes, seconds and nanoseconds as big-endian uint32 (fixext 8: 0xd7 0x00).
// Times before 1970 are sent as 0.
func appendEventTime(b []byte, t time.Time) []byte {
	var sec, nsec uint32
	if s := t.Unix(); s >= 0 {
		sec, nsec = uint32(s), uint32(t.Nanosecond())
	}
	b = append(b, 0xd7, 0x00)
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(b, sec), nsec)
}

// msgExt is a decoded extension value.
type msgExt struct {
	Type int8
	Data []byte
}

var (
	// errShort: the input ends inside a value (a stream reader reads more).
	errShort = io.ErrUnexpectedEOF
	errDepth = errors.New("msgpack: nested too deep")
	errType  = errors.New("msgpack: unsupported type")
	errKey   = errors.New("msgpack: map key is not a string")
)

// maxDepth bounds the nesting of arrays and maps the decoder accepts.
const maxDepth = 32

// decode reads one value from the start of b and returns it with the number
// of bytes it took. Values: nil, bool, int64 (uint64 only above
// math.MaxInt64), string, []byte, []any, map[string]any, msgExt; floats are
// not accepted. Lengths are checked against the bytes left before anything
// is allocated, so no header can make it allocate more than the input could
// hold; strings, bins and ext data are copies, not views of b.
func decode(b []byte) (any, int, error) {
	d := decoder{b: b}
	v, err := d.value(0)
	return v, d.off, err
}

type decoder struct {
	b   []byte
	off int
}

//go:noinline
func (d *decoder) take(n uint64) ([]byte, error) {
	if n > uint64(len(d.b)-d.off) {
		return nil, errShort
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p, nil
}

// uint reads a big-endian unsigned integer of size 1<<k bytes.
func (d *decoder) uint(k byte) (uint64, error) {
	p, err := d.take(1 << k)
	if err != nil {
		return 0, err
	}
	var u uint64
	for _, c := range p {
		u = u<<8 | uint64(c)
	}
	return u, nil
}

func (d *decoder) bytes(k byte) ([]byte, error) {
	n, err := d.uint(k)
	if err != nil {
		return nil, err
	}
	p, err := d.take(n)
	return append([]byte{}, p...), err
}

func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errDepth
	}
	p, err := d.take(1)
	if err != nil {
		return nil, err
	}
	c := p[0]
	switch {
	case c < 0x80:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c < 0x90:
		return d.dict(uint64(c&0x0f), depth)
	case c < 0xa0:
		return d.array(uint64(c&0x0f), depth)
	case c < 0xc0:
		p, err := d.take(uint64(c & 0x1f))
		return string(p), err
	}
	var n uint64
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2, 0xc3:
		return c == 0xc3, nil
	case 0xc4, 0xc5, 0xc6:
		p, err := d.bytes(c - 0xc4)
		if err != nil {
			return nil, err
		}
		return p, nil
	case 0xc7, 0xc8, 0xc9:
		if n, err = d.uint(c - 0xc7); err != nil {
			return nil, err
		}
		return d.ext(n)
	case 0xcc, 0xcd, 0xce, 0xcf:
		if n, err = d.uint(c - 0xcc); err != nil {
			return nil, err
		}
		if n > math.MaxInt64 {
			return n, nil
		}
		return int64(n), nil
	case 0xd0, 0xd1, 0xd2, 0xd3:
		if n, err = d.uint(c - 0xd0); err != nil {
			return nil, err
		}
		shift := 64 - 8<<(c-0xd0) // sign-extend from the value's size
		return int64(n<<shift) >> shift, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return d.ext(1 << (c - 0xd4))
	case 0xd9, 0xda, 0xdb:
		p, err := d.bytes(c - 0xd9)
		return string(p), err
	case 0xdc, 0xdd:
		if n, err = d.uint(c - 0xdb); err != nil {
			return nil, err
		}
		return d.array(n, depth)
	case 0xde, 0xdf:
		if n, err = d.uint(c - 0xdd); err != nil {
			return nil, err
		}
		return d.dict(n, depth)
	}
	return nil, errType // 0xc1 (never used), float 32 and 64
}

func (d *decoder) ext(n uint64) (any, error) {
	p, err := d.take(1 + n)
	if err != nil {
		return nil, err
	}
	return msgExt{int8(p[0]), append([]byte{}, p[1:]...)}, nil
}

func (d *decoder) array(n uint64, depth int) (any, error) {
	// Every element takes at least one byte.
	if n > uint64(len(d.b)-d.off) {
		return nil, errShort
	}
	a := make([]any, n)
	for i := range a {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a[i] = v
	}
	return a, nil
}

func (d *decoder) dict(n uint64, depth int) (any, error) {
	// Every pair takes at least two bytes.
	if n > uint64(len(d.b)-d.off)/2 {
		return nil, errShort
	}
	m := make(map[string]any, min(n, 16))
	for range n {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, errKey
		}
		if m[ks], err = d.value(depth + 1); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// msgReader reads values one after another from a stream. A value larger
// than max bytes is an error: nothing a forward server sends comes near it.
type msgReader struct {
	r    io.Reader
	max  int
	b    []byte
	s, e int // b[s:e] holds the bytes read but not yet decoded
}

func (m *msgReader) next() (any, error) {
	for {
		if m.e > m.s {
			v, n, err := decode(m.b[m.s:m.e])
			if err == nil {
				if m.s += n; m.s == m.e {
					m.s, m.e = 0, 0
				}
				return v, nil
			}
			if err != errShort {
				return nil, err
			}
			if m.e-m.s >= m.max {
				return nil, errors.New("msgpack: message over the size limit")
			}
		}
		if m.s > 0 {
			m.e = copy(m.b, m.b[m.s:m.e])
			m.s = 0
		}
		if m.e == len(m.b) {
			nb := make([]byte, min(max(2*len(m.b), 512), m.max))
			copy(nb, m.b[:m.e])
			m.b = nb
		}
		n, err := m.r.Read(m.b[m.e:])
		m.e += n
		if n == 0 && err != nil {
			if err == io.EOF && m.e > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
