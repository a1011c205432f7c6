package codec

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// readAll feeds stream to a LineReader of the given size in chunks of
// chunk bytes, as reads from a socket would arrive, and collects the lines.
func readAll(t *testing.T, stream string, size, chunk int) ([]string, error) {
	t.Helper()
	lr := NewLineReader(size)
	src := strings.NewReader(stream)
	var lines []string
	for {
		free := lr.Free()
		if len(free) == 0 {
			t.Fatalf("no free space with %d bytes buffered", lr.Buffered())
		}
		n, _ := src.Read(free[:min(len(free), chunk)])
		lr.Filled(n)
		for {
			line, err := lr.Next()
			if err != nil {
				return lines, err
			}
			if line == nil {
				break
			}
			lines = append(lines, string(line))
		}
		if n == 0 {
			if lr.Buffered() > 0 {
				t.Fatalf("%d bytes left without a line end", lr.Buffered())
			}
			return lines, nil
		}
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("k", MaxLine)
	stream := "A a OK 1\r\nR a OK\n\nQ " + long[:MaxLine-7] + " FREE\n" + "A b TIMEOUT\n"
	want := []string{"A a OK 1", "R a OK", "", "Q " + long[:MaxLine-7] + " FREE", "A b TIMEOUT"}
	tests := []struct {
		name        string
		size, chunk int
	}{
		{"one read", 64 << 10, 64 << 10},
		{"byte by byte", 64 << 10, 1},
		{"smallest buffer, lines straddle its end", 0, 7},
		{"smallest buffer, full reads", 0, 1 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(t, stream, tc.size, tc.chunk)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("lines %q, want %q", got, want)
			}
		})
	}
}

func TestLineReaderTooLong(t *testing.T) {
	for _, chunk := range []int{1, 100, 1 << 20} {
		_, err := readAll(t, "A a OK 1\n"+strings.Repeat("x", MaxLine+5)+"\nA b OK 2\n", 0, chunk)
		if !errors.Is(err, ErrTooLong) {
			t.Errorf("chunk %d: err %v, want ErrTooLong", chunk, err)
		}
	}
}

func TestLineReaderZeroAllocs(t *testing.T) {
	lr := NewLineReader(4096)
	batch := bytes.Repeat([]byte("A some/key OK 123456\n"), 100)
	allocs := testing.AllocsPerRun(100, func() {
		n := copy(lr.Free(), batch)
		lr.Filled(n)
		for {
			line, err := lr.Next()
			if err != nil || line == nil {
				break
			}
		}
	})
	if allocs != 0 {
		t.Errorf("a batch of lines allocates %v times", allocs)
	}
}
