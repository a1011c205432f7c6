package codec

import (
	"strconv"
	"strings"
	"testing"
)

var (
	acquireLine = []byte("A orders/42 10000 500\n")
	acquireOK   = Response{Op: OpAcquire, Key: []byte("orders/42"), Status: StatusOK, Token: 1234567}

	// The owner forms (protocol 1.1), with a 128-bit random owner in hex as
	// the protocol suggests clients use.
	ownerHex          = []byte("9f86d081884c7d659a2feaa0c55ad015")
	acquireOwnerLine  = []byte("A orders/42 10000 500 9f86d081884c7d659a2feaa0c55ad015\n")
	acquireOwnerReq   = Request{Op: OpAcquire, Key: []byte("orders/42"), LeaseMs: 10000, WaitMs: 500, Owner: ownerHex}
	heldOwnerLine     = []byte("Q orders/42 HELD 1234567 9500 9f86d081884c7d659a2feaa0c55ad015")
	heldOwnerResponse = Response{Op: OpQuery, Key: []byte("orders/42"), Status: StatusHeld, Token: 1234567, RemainingMs: 9500, Owner: ownerHex}
)

func BenchmarkParseAcquire(b *testing.B) {
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(acquireLine)))
	for b.Loop() {
		line, _, _ := SplitLine(acquireLine)
		if err := ParseRequest(line, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseAcquireOwner is BenchmarkParseAcquire with an owner: the
// fifth field should cost a field scan and a byte check, nothing more.
func BenchmarkParseAcquireOwner(b *testing.B) {
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(acquireOwnerLine)))
	for b.Loop() {
		line, _, _ := SplitLine(acquireOwnerLine)
		if err := ParseRequest(line, &r); err != nil || r.Owner == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendAcquireOwner formats the acquire with an owner, as the Go
// client does for every acquire it may have to retry.
func BenchmarkAppendAcquireOwner(b *testing.B) {
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequest(buf[:0], &acquireOwnerReq)
	}
}

func BenchmarkAppendAcquireOK(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendResponse(buf[:0], &acquireOK)
	}
}

// BenchmarkParsePipelined reads 100 mixed lines, a third of them bad, from
// one buffer and answers the bad ones, as the server's read loop does.
func BenchmarkParsePipelined(b *testing.B) {
	in := mixedLines(100)
	out := make([]byte, 0, 8192)
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		out = out[:0]
		for buf := in; ; {
			line, n, err := SplitLine(buf)
			if err != nil || n == 0 {
				break
			}
			if err := ParseRequest(line, &r); err != nil {
				out = AppendParseError(out, &r, err.(*ParseError))
			}
			buf = buf[n:]
		}
	}
}

func BenchmarkParseResponse(b *testing.B) {
	line := []byte("A orders/42 OK 1234567")
	var r Response
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseResponse(line, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseHeldOwner parses a query's answer that names the owner.
func BenchmarkParseHeldOwner(b *testing.B) {
	var r Response
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseResponse(heldOwnerLine, &r); err != nil || r.Owner == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendHeldOwner formats that answer, as the server does for Q.
func BenchmarkAppendHeldOwner(b *testing.B) {
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendResponse(buf[:0], &heldOwnerResponse)
	}
}

// TestZeroAllocs makes an allocation on the hot path fail the build, not
// just show up in a benchmark nobody runs.
func TestZeroAllocs(t *testing.T) {
	in := mixedLines(100)
	buf := make([]byte, 0, 8192)
	errLine := []byte("A orders/42 0 0")
	errLines := [][]byte{
		errLine, []byte("A orders/42 1 0 " + strings.Repeat("o", MaxOwner+1)),
		[]byte("A orders/42 1 0 o\tp"), []byte("A orders/42 1 0 o x"),
	}
	respLines := [][]byte{
		[]byte("A orders/42 OK 1234567"), []byte("Q k HELD 1 2"), []byte("K k NOTHELD"),
		[]byte("A k MOVED 127.0.0.1:7710"), []byte("? - ERR toolong line longer than 1024 bytes"),
		heldOwnerLine, []byte("Q k HELD 1 2 " + strings.Repeat("o", MaxOwner)),
	}
	badRespLines := [][]byte{
		[]byte("Q k HELD 1 2 " + strings.Repeat("o", MaxOwner+1)), []byte("Q k HELD 1 2 o\x01"),
		[]byte("Q k HELD 1 2 o x"),
	}
	var req Request
	var resp Response
	cases := map[string]func(){
		"parse acquire": func() {
			line, _, _ := SplitLine(acquireLine)
			_ = ParseRequest(line, &req)
		},
		"parse acquire with owner": func() {
			line, _, _ := SplitLine(acquireOwnerLine)
			if ParseRequest(line, &req) != nil || req.Owner == nil {
				panic("acquire with owner did not parse")
			}
		},
		"parse pipelined owners": func() {
			for b := ownerStream; ; {
				line, n, _ := SplitLine(b)
				if n == 0 {
					break
				}
				if err := ParseRequest(line, &req); err != nil {
					buf = AppendParseError(buf[:0], &req, err.(*ParseError))
				}
				b = b[n:]
			}
		},
		"answer bad owners": func() {
			for _, l := range errLines {
				err := ParseRequest(l, &req)
				buf = AppendParseError(buf[:0], &req, err.(*ParseError))
			}
		},
		"format request with owner": func() { buf = AppendRequest(buf[:0], &acquireOwnerReq) },
		"format held with owner":    func() { buf = AppendResponse(buf[:0], &heldOwnerResponse) },
		"parse bad responses": func() {
			for _, l := range badRespLines {
				if ParseResponse(l, &resp) == nil {
					panic("bad response parsed")
				}
			}
		},
		"parse pipelined": func() {
			for b := in; ; {
				line, n, _ := SplitLine(b)
				if n == 0 {
					break
				}
				_ = ParseRequest(line, &req)
				b = b[n:]
			}
		},
		"answer bad request": func() {
			err := ParseRequest(errLine, &req)
			buf = AppendParseError(buf[:0], &req, err.(*ParseError))
		},
		"format request": func() { buf = AppendRequest(buf[:0], &req) },
		"format response": func() {
			for _, l := range respLines {
				_ = ParseResponse(l, &resp)
				buf = AppendResponse(buf[:0], &resp)
			}
		},
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", name, n)
		}
	}
}

// BenchmarkParseAcquireNaive is the baseline the codec is measured against:
// the same line parsed the obvious way, with strings.Fields and strconv. It
// shows what parsing in place saves per request.
func BenchmarkParseAcquireNaive(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(acquireLine)))
	for b.Loop() {
		f := strings.Fields(strings.TrimRight(string(acquireLine), "\r\n"))
		if len(f) != 4 || f[0] != "A" {
			b.Fatal("bad line")
		}
		key := []byte(f[1])
		lease, err1 := strconv.ParseUint(f[2], 10, 32)
		wait, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || len(key) == 0 || lease == 0 || wait < -1 {
			b.Fatal("bad fields")
		}
	}
}
