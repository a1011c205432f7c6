package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// testParts are the parts of the file testFile writes: one empty, one
// longer than the reader's buffer.
var testParts = [][]byte{
	[]byte("shard one"),
	nil,
	bytes.Repeat([]byte("0123456789abcdef"), 10000),
}

func testFile(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, len(testParts))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range testParts {
		part := Part{Shard: uint64(i + 1), Locks: uint64(10 * i), Length: uint64(len(p))}
		if err := w.Part(part, func(pw io.Writer) error {
			// In pieces, as a stream encoder writes.
			for len(p) > 0 {
				n := min(len(p), 1000)
				if _, err := pw.Write(p[:n]); err != nil {
					return err
				}
				p = p[n:]
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	data := testFile(t)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if r.Shards() != len(testParts) {
		t.Fatalf("%d shards", r.Shards())
	}
	for i, want := range testParts {
		p, err := r.Next()
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		if p != (Part{Shard: uint64(i + 1), Locks: uint64(10 * i), Length: uint64(len(want))}) {
			t.Fatalf("part %d: %+v", i+1, p)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("part %d: read %d bytes, %v", i+1, len(got), err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last part: %v", err)
	}

	// Next reads what the caller left of a part, and checks it.
	r, _ = NewReader(bytes.NewReader(data))
	for range testParts {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("skipping the parts: %v", err)
	}

	parts, err := Check(bytes.NewReader(data))
	if err != nil || len(parts) != len(testParts) || parts[2].Length != uint64(len(testParts[2])) {
		t.Fatalf("Check: %+v, %v", parts, err)
	}
}

// TestBadFiles: every truncation, every flipped byte and each malformed
// header is an error matching ErrBad, from Check and from a Reader read
// to its end.
func TestBadFiles(t *testing.T) {
	data := testFile(t)
	header := func(magic string, version byte, shards uint32) []byte {
		return binary.LittleEndian.AppendUint32(append([]byte(magic), version), shards)
	}
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"empty", "truncated", nil},
		{"not a backup", "not a baton backup", []byte("btsn\x03hello, world")},
		{"version 2", "format version 2", header(Magic, 2, 1)},
		{"no shards", "0 shards", header(Magic, Version, 0)},
		{"a frame short", "truncated in shard 3 of 3", data[:len(data)-(frameHeaderLen+len(testParts[2])+crcLen)]},
		{"data after the last shard", "data after the last shard", append(bytes.Clone(data), 0)},
		{"shard 1 twice", "frame 2 is of shard 1", func() []byte {
			d := bytes.Clone(data)
			binary.LittleEndian.PutUint32(d[headerLen+frameHeaderLen+len(testParts[0])+crcLen:], 1)
			return d
		}()},
		{"flipped part byte", "shard 3: checksum mismatch", func() []byte {
			d := bytes.Clone(data)
			d[len(d)-100] ^= 1
			return d
		}()},
	}
	check := func(name, want string, data []byte) {
		t.Helper()
		_, err := Check(bytes.NewReader(data))
		if !errors.Is(err, ErrBad) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Check: %v, want ErrBad saying %q", name, err, want)
		}
		if err := readAll(data); !errors.Is(err, ErrBad) {
			t.Fatalf("%s: reading every part: %v", name, err)
		}
	}
	for _, tc := range tests {
		check(tc.name, tc.want, tc.data)
	}
	// Every byte but those deep inside the long part, which are all alike.
	bigStart := len(data) - crcLen - len(testParts[2])
	flipped := bytes.Clone(data)
	for n := 0; n < len(data); n++ {
		if n > bigStart+100 && n < len(data)-100 && n%997 != 0 {
			continue
		}
		check(fmt.Sprintf("cut to %d bytes", n), "", data[:n])
		flipped[n] ^= 0x10
		check(fmt.Sprintf("byte %d flipped", n), "", flipped)
		flipped[n] ^= 0x10
	}
}

// readAll reads a file as a restore does: each part to its end, then Next.
func readAll(data []byte) error {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return err
		}
	}
}

func TestFrameLayout(t *testing.T) {
	data := testFile(t)
	if string(data[:4]) != "btbk" || data[4] != 1 || binary.LittleEndian.Uint32(data[5:]) != 3 {
		t.Fatalf("header % x", data[:headerLen])
	}
	frame := data[headerLen : headerLen+frameHeaderLen+len(testParts[0])+crcLen]
	want := binary.LittleEndian.AppendUint32(nil, 1)
	want = binary.LittleEndian.AppendUint64(want, 0)
	want = binary.LittleEndian.AppendUint64(want, uint64(len(testParts[0])))
	want = append(want, testParts[0]...)
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(frame, want) {
		t.Fatalf("frame 1\n% x, want\n% x", frame, want)
	}
}

func TestWriterMisuse(t *testing.T) {
	write := func(p []byte) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(p); return err }
	}
	if _, err := NewWriter(io.Discard, 0); err == nil {
		t.Error("a writer of 0 shards")
	}
	w, _ := NewWriter(io.Discard, 2)
	if err := w.Part(Part{Shard: 2}, write(nil)); err == nil {
		t.Error("shard 2 first")
	}
	if err := w.Part(Part{Shard: 1, Length: 3}, write([]byte("four"))); err == nil {
		t.Error("a part longer than its frame says")
	}
	if err := w.Part(Part{Shard: 1}, write(nil)); err == nil {
		t.Error("a writer that failed went on")
	}

	w, _ = NewWriter(io.Discard, 2)
	if err := w.Part(Part{Shard: 1, Length: 1}, write([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "1 of 2 shards") {
		t.Errorf("Close with a shard missing: %v", err)
	}
	boom := errors.New("boom")
	if err := w.Part(Part{Shard: 2}, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("the part's error: %v", err)
	}
	if err := w.Close(); !errors.Is(err, boom) {
		t.Errorf("Close after a failed part: %v", err)
	}
}

// TestReadErrorsPassThrough: an error of the underlying reader is not
// taken for a bad file.
func TestReadErrorsPassThrough(t *testing.T) {
	boom := errors.New("connection reset")
	data := testFile(t)
	_, err := Check(io.MultiReader(bytes.NewReader(data[:100]), errReader{boom}))
	if !errors.Is(err, boom) || errors.Is(err, ErrBad) {
		t.Fatalf("Check: %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
