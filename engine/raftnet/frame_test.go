package raftnet

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// encodeFrame is a frame as sender.write puts it on the wire.
func encodeFrame(kind byte, payload []byte) []byte {
	b := make([]byte, headerSize+len(payload))
	copy(b[headerSize:], payload)
	putHeader(b[:headerSize], kind, payload)
	return b
}

func TestReadFrame(t *testing.T) {
	good := encodeFrame(frameBatch, []byte("a batch"))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 1
	endWithPayload := encodeFrame(frameEnd, []byte("x"))
	unknown := encodeFrame(9, []byte("x"))
	huge := encodeFrame(frameChunk, nil)
	huge[1], huge[2], huge[3], huge[4] = 0xff, 0xff, 0xff, 0xff

	cases := []struct {
		name    string
		in      []byte
		kind    byte
		payload string
		err     error
	}{
		{"batch", good, frameBatch, "a batch", nil},
		{"chunk", encodeFrame(frameChunk, []byte("chunk")), frameChunk, "chunk", nil},
		{"end", encodeFrame(frameEnd, nil), frameEnd, "", nil},
		{"end ack", encodeFrame(frameEndAck, nil), frameEndAck, "", nil},
		{"empty batch", encodeFrame(frameBatch, nil), frameBatch, "", nil},
		{"nothing", nil, 0, "", io.EOF},
		{"half a header", good[:4], 0, "", io.ErrUnexpectedEOF},
		{"half a payload", good[:headerSize+3], 0, "", io.ErrUnexpectedEOF},
		{"bad checksum", corrupt, 0, "", errBadFrame},
		{"end with a payload", endWithPayload, 0, "", errBadFrame},
		{"unknown kind", unknown, 0, "", errBadFrame},
		{"too large", huge, 0, "", errBadFrame},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hdr [headerSize]byte
			kind, payload, _, err := readFrame(bytes.NewReader(c.in), hdr[:], nil)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if err == nil && (kind != c.kind || string(payload) != c.payload) {
				t.Fatalf("got kind %d payload %q, want %d %q", kind, payload, c.kind, c.payload)
			}
		})
	}
}

// TestReadFrameReusesBuffer: frames that fit the buffer read into it, and
// a larger one grows it, so that a connection's reader allocates only when
// a frame is larger than any before.
func TestReadFrameReusesBuffer(t *testing.T) {
	var stream bytes.Buffer
	stream.Write(encodeFrame(frameBatch, bytes.Repeat([]byte{1}, 100)))
	stream.Write(encodeFrame(frameBatch, bytes.Repeat([]byte{2}, 50)))
	stream.Write(encodeFrame(frameBatch, bytes.Repeat([]byte{3}, 300)))
	var hdr [headerSize]byte
	buf := make([]byte, 128)
	for i, want := range []struct {
		size int
		cap  int
	}{{100, 128}, {50, 128}, {300, 300}} {
		_, payload, grown, err := readFrame(&stream, hdr[:], buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(payload) != want.size || cap(grown) != want.cap {
			t.Fatalf("frame %d: %d bytes in a buffer of %d, want %d in %d", i, len(payload), cap(grown), want.size, want.cap)
		}
		buf = grown
	}
}

// FuzzReadFrame: any bytes give a frame or an error, never a panic, and a
// frame read back encodes to the bytes it was read from.
func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrame(frameBatch, []byte("seed")))
	f.Add(encodeFrame(frameEnd, nil))
	f.Add([]byte{frameChunk, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		var hdr [headerSize]byte
		kind, payload, _, err := readFrame(bytes.NewReader(in), hdr[:], nil)
		if err != nil {
			return
		}
		if got := encodeFrame(kind, payload); !bytes.Equal(got, in[:len(got)]) {
			t.Fatalf("frame %d %q encodes to %x, read from %x", kind, payload, got, in)
		}
	})
}
