package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// normalize zeroes the fields an op does not encode, which is what a decode
// of its encoding yields.
func normalize(c Command) Command {
	switch c.Op {
	case OpGrant:
		c.Token = 0
	case OpRelease, OpExpire:
		c.LeaseMs = 0
	}
	return c
}

func TestBatchRoundTrip(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		name string
		h    Header
		cmds []Command
	}{
		{"barrier", Header{Proposer: 1, Seq: 2}, nil},
		{"grant", Header{Proposer: math.MaxUint64, Seq: 1}, []Command{grant("a", 1000)}},
		{"release any", Header{}, []Command{release("a", 0)}},
		{"release token", Header{}, []Command{release("a", 1<<10|1)}},
		{"extend", Header{}, []Command{extend("a", 5, 86400000)}},
		{"expire", Header{}, []Command{expire("a", 9)}},
		{"extremes", Header{Seq: math.MaxUint64}, []Command{
			grant(long, math.MaxUint32),
			extend(long, math.MaxUint64, math.MaxUint32),
			expire("\xff", math.MaxUint64),
			release("x", math.MaxUint64),
		}},
		{"unused fields are not encoded", Header{}, []Command{
			{Op: OpGrant, Key: []byte("g"), Token: 99, LeaseMs: 3},
			{Op: OpRelease, Key: []byte("r"), Token: 4, LeaseMs: 99},
			{Op: OpExpire, Key: []byte("e"), Token: 5, LeaseMs: 99},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			for _, c := range tc.cmds {
				b.Append(c)
			}
			if b.Len() != len(tc.cmds) {
				t.Fatalf("Len = %d, want %d", b.Len(), len(tc.cmds))
			}
			data := b.Seal(tc.h)
			if b.Size() != len(data) {
				t.Fatalf("Size = %d, Seal gave %d bytes", b.Size(), len(data))
			}
			h, cmds, err := DecodeBatch(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if h != tc.h {
				t.Errorf("header = %+v, want %+v", h, tc.h)
			}
			if len(cmds) != len(tc.cmds) {
				t.Fatalf("%d commands, want %d", len(cmds), len(tc.cmds))
			}
			for i := range cmds {
				if want := normalize(tc.cmds[i]); !reflect.DeepEqual(cmds[i], want) {
					t.Errorf("cmd %d = %+v, want %+v", i, cmds[i], want)
				}
			}
			if again := encode(h, cmds...); !bytes.Equal(again, data) {
				t.Errorf("re-encoding differs:\n%x\n%x", again, data)
			}
		})
	}
}

func TestBatchLayout(t *testing.T) {
	var b Batch
	b.Append(extend("ab", 300, 5))
	got := b.Seal(Header{Proposer: 0x0102, Seq: 3})
	want := []byte{
		1,                      // version
		2, 1, 0, 0, 0, 0, 0, 0, // proposer
		3, 0, 0, 0, 0, 0, 0, 0, // seq
		1, 0, 0, 0, // count
		3, 2, 'a', 'b', 0xac, 0x02, 5, // extend, keylen, key, token 300, lease 5
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
}

func TestBatchReuse(t *testing.T) {
	var b Batch
	if got := b.Seal(Header{Seq: 1}); len(got) != headerLen || b.Len() != 0 {
		t.Fatalf("zero Batch sealed to %d bytes, Len %d", len(got), b.Len())
	}
	for i := 0; i < 100; i++ {
		b.Append(grant("key", 1))
	}
	first := b.Seal(Header{Seq: 1})
	b.Reset()
	if b.Len() != 0 {
		t.Fatal("Len after Reset")
	}
	b.Append(release("other", 0))
	second := b.Seal(Header{Seq: 2})
	if &first[0] != &second[0] {
		t.Error("Reset did not keep the buffer")
	}
	_, cmds, err := DecodeBatch(second, nil)
	if err != nil || len(cmds) != 1 || string(cmds[0].Key) != "other" {
		t.Fatalf("after Reset: %v %+v", err, cmds)
	}
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		for i := 0; i < 100; i++ {
			b.Append(grant("key", 1))
		}
		b.Seal(Header{})
	})
	if allocs != 0 {
		t.Errorf("refilling a Batch allocates %v times", allocs)
	}
}

func TestAppendPanicsOnInvalidCommand(t *testing.T) {
	for _, c := range []Command{
		{Op: 0, Key: []byte("k")},
		{Op: 5, Key: []byte("k")},
		{Op: OpGrant},
		{Op: OpGrant, Key: make([]byte, MaxKeyLen+1)},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Append(%+v) did not panic", c)
				}
			}()
			var b Batch
			b.Append(c)
		}()
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	hdr := func(n uint32) []byte {
		h := make([]byte, headerLen)
		h[0] = encVersion
		binary.LittleEndian.PutUint32(h[17:], n)
		return h
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	valid := encode(Header{}, grant("k", 1))
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short header", valid[:headerLen-1]},
		{"version 0", cat([]byte{0}, valid[1:])},
		{"version 2", cat([]byte{2}, valid[1:])},
		{"count larger than data", cat(hdr(2), valid[headerLen:])},
		{"huge count", cat(hdr(math.MaxUint32), bytes.Repeat([]byte{1}, 64))},
		{"count smaller than data", cat(hdr(0), valid[headerLen:])},
		{"trailing byte", cat(valid, []byte{0})},
		{"op 0", cat(hdr(1), []byte{0, 1, 'k', 1})},
		{"op 5", cat(hdr(1), []byte{5, 1, 'k', 1})},
		{"key length 0", cat(hdr(1), []byte{1, 0, 1, 1})},
		{"key length 251", cat(hdr(1), []byte{1, 0xfb, 0x01}, bytes.Repeat([]byte{'k'}, 251), []byte{1})},
		{"key past end", cat(hdr(1), []byte{1, 9, 'k', 1})},
		{"missing lease", cat(hdr(1), []byte{1, 2, 'k', 'k'})},
		{"unterminated varint", cat(hdr(1), []byte{2, 1, 'k', 0x80})},
		{"non-minimal varint", cat(hdr(1), []byte{2, 1, 'k', 0x81, 0x00})},
		{"non-minimal key length", cat(hdr(1), []byte{2, 0x81, 0x00, 'k', 1})},
		{"varint overflow", cat(hdr(1), []byte{4, 1, 'k'}, bytes.Repeat([]byte{0xff}, 10), []byte{1})},
		{"lease over 32 bits", cat(hdr(1), []byte{1, 1, 'k', 0x80, 0x80, 0x80, 0x80, 0x10})},
		{"extend missing lease", cat(hdr(1), []byte{3, 1, 'k', 5})},
		{"second command truncated", cat(hdr(2), valid[headerLen:], []byte{2, 1, 'k'})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prev := []Command{grant("keep", 1)}
			h, cmds, err := DecodeBatch(tc.data, prev)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if h != (Header{}) || len(cmds) != 1 || string(cmds[0].Key) != "keep" {
				t.Errorf("on error got %+v %+v, want the input commands untouched", h, cmds)
			}
		})
	}
}

func TestDecodeBatchAppendsAndAliases(t *testing.T) {
	data := encode(Header{Seq: 4}, grant("a", 1), release("bb", 2))
	cmds, err := decodeAll(t, data, []Command{expire("z", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 3 || string(cmds[0].Key) != "z" || string(cmds[2].Key) != "bb" {
		t.Fatalf("got %+v", cmds)
	}
	if &cmds[1].Key[0] != &data[headerLen+2] {
		t.Error("decoded key does not alias the entry")
	}
	if cap(cmds[1].Key) != len(cmds[1].Key) {
		t.Error("decoded key's capacity reaches into the next command")
	}
	buf := make([]Command, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		_, buf, _ = DecodeBatch(data, buf[:0])
		_, buf, _ = DecodeBatch(data[:len(data)-1], buf[:0])
	})
	if allocs != 0 {
		t.Errorf("DecodeBatch into a large enough slice allocates %v times", allocs)
	}
}

func decodeAll(t *testing.T, data []byte, cmds []Command) ([]Command, error) {
	t.Helper()
	_, cmds, err := DecodeBatch(data, cmds)
	return cmds, err
}

// FuzzDecodeBatch checks that DecodeBatch never panics, and that whatever it
// accepts re-encodes to the very same bytes (each batch has one encoding) and
// decodes again to the same commands.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(encode(Header{}))
	f.Add(encode(Header{Proposer: 1, Seq: 2}, grant("a", 1000), release("a", 0), extend("b", 1025, 5), expire("c", 2049)))
	f.Add(encode(Header{Seq: math.MaxUint64}, grant(strings.Repeat("x", MaxKeyLen), math.MaxUint32)))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, cmds, err := DecodeBatch(data, nil)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || len(cmds) != 0 {
				t.Fatalf("error %v with %d commands", err, len(cmds))
			}
			return
		}
		again := encode(h, cmds...)
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, data)
		}
		h2, cmds2, err := DecodeBatch(again, nil)
		if err != nil || h2 != h || !reflect.DeepEqual(cmds, cmds2) {
			t.Fatalf("second decode: %v %+v %+v", err, h2, cmds2)
		}
	})
}
