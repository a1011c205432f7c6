package codec

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mixedLines returns n pipelined request lines, good and bad, in every
// spacing and terminator the protocol allows.
func mixedLines(n int) []byte {
	forms := []string{
		"A orders/%d 10000 500\n",
		"R orders/%d 17\r\n",
		"R orders/%d\n",
		"K  orders/%d  17  3000 \n",
		"Q orders/%d\n",
		"A orders/%d 10000 -1\r\n",
		"\n",
		"   \r\n",
		"q orders/%d\n",
		"A orders/%d 0 0\n",
		"R orders/%d 0\n",
		"K orders/%d 18446744073709551616 1\n",
		"Q orders/%d extra\n",
		"A ключ/%d 1 86400000\n",
		"Q bad\x7fkey/%d\n",
		"A orders/%d 10000\n",
		"Q k\r\r\n",
		"H s3cret/%d\r\n",
		"H\n",
		"H s3cret %d\n",
	}
	var buf []byte
	for i := range n {
		buf = append(buf, strings.ReplaceAll(forms[i%len(forms)], "%d", strconv.Itoa(i))...)
	}
	return buf
}

// readRequests plays a connection reader: it accumulates the chunks as they
// arrive and parses every complete line, as the server does. Each request
// or error is described as the bytes the server would answer (or echo), so
// results compare as strings and outlive the buffer. closed reports an
// overlong line, after which the reader stops; pending is the number of
// bytes still waiting for their LF (0 once closed). The splitting is
// splitAll's, so both fuzz and stream tests exercise one reader loop.
func readRequests(chunks ...[]byte) (events []string, pending int, closed bool) {
	lines, pending, closed := splitAll(chunks...)
	for _, line := range lines {
		var r Request
		if err := ParseRequest([]byte(line), &r); err != nil {
			events = append(events, string(AppendParseError(nil, &r, err.(*ParseError))))
		} else {
			events = append(events, string(AppendRequest(nil, &r)))
		}
	}
	if closed {
		events = append(events, string(AppendParseError(nil, nil, ErrTooLong)))
	}
	return events, pending, closed
}

func TestStreaming(t *testing.T) {
	lines := mixedLines(120)
	long := strings.Repeat("x", MaxLine)
	inputs := map[string][]byte{
		"complete":        lines,
		"partial tail":    append(slices.Clip(lines), "A orders/1 10"...),
		"cr tail":         append(slices.Clip(lines), "Q k\r"...),
		"toolong with LF": append(slices.Clip(lines[:300]), "Q "+long+"\nQ after\n"...),
		"toolong no LF":   append(slices.Clip(lines[:300]), "Q "+long...),
		"longest line":    []byte("Q k\n" + "Q " + strings.Repeat("k", MaxKey) + strings.Repeat(" ", MaxLine-MaxKey-2) + "\r\nQ z\n"),
		"owners":          ownerStream,
	}
	for name, in := range inputs {
		want, wantPending, wantClosed := readRequests(in)
		if name == "complete" && (len(want) != 120 || wantPending != 0 || wantClosed) {
			t.Fatalf("%s: %d events, %d pending, closed %v", name, len(want), wantPending, wantClosed)
		}
		if strings.HasPrefix(name, "toolong") != wantClosed {
			t.Errorf("%s: closed = %v", name, wantClosed)
		}
		for k := range len(in) + 1 {
			got, pending, closed := readRequests(in[:k], in[k:])
			if !slices.Equal(got, want) || closed != wantClosed || !closed && pending != wantPending {
				t.Fatalf("%s split at %d: %d events (pending %d, closed %v), want %d (%d, %v)\nfirst difference near %q",
					name, k, len(got), pending, closed, len(want), wantPending, wantClosed, firstDiff(got, want))
			}
		}
		bytewise := make([][]byte, len(in))
		for i := range in {
			bytewise[i] = in[i : i+1]
		}
		if got, pending, closed := readRequests(bytewise...); !slices.Equal(got, want) || closed != wantClosed || !closed && pending != wantPending {
			t.Errorf("%s byte by byte: %d events, want %d; first difference near %q", name, len(got), len(want), firstDiff(got, want))
		}
	}
}

// ownerStream holds acquires with owners (protocol 1.1), good and bad, and
// ends in one whose LF has not arrived yet.
var ownerStream = []byte("A k 1 0 o1\nA k 1 -1 " + strings.Repeat("o", MaxOwner) + "\r\nA  k  1  0  o2  \n" +
	"A k 1 0 " + strings.Repeat("o", MaxOwner+1) + "\nA k 1 0 o\x7f\r\nA k 1 0 o\tp\nA k 1 0 o x\n" +
	"R k 1 o\nQ k o\nA k 1 0 o3")

// TestStreamingOwners pins what the reader makes of ownerStream, so that the
// split-anywhere checks of TestStreaming compare against the right answer.
func TestStreamingOwners(t *testing.T) {
	want := []string{
		"A k 1 0 o1\n",
		"A k 1 -1 " + strings.Repeat("o", MaxOwner) + "\n",
		"A k 1 0 o2\n",
		"A k ERR badrequest owner longer than 64 bytes\n",
		"A k ERR badrequest owner must not contain control bytes or DEL\n",
		"A k ERR badrequest owner must not contain control bytes or DEL\n",
		"A k ERR badrequest too many fields\n",
		"R k ERR badrequest too many fields\n",
		"Q k ERR badrequest too many fields\n",
	}
	got, pending, closed := readRequests(ownerStream)
	if !slices.Equal(got, want) || pending != len("A k 1 0 o3") || closed {
		t.Errorf("got %q (pending %d, closed %v), want %q", got, pending, closed, want)
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " vs " + b[i]
		}
	}
	return "(one is a prefix of the other)"
}

// TestMixedLinesCover checks that the pipelined input really mixes good and
// bad requests, so the streaming test and benchmark exercise both paths.
func TestMixedLinesCover(t *testing.T) {
	events, _, _ := readRequests(mixedLines(100))
	var good, bad int
	for _, e := range events {
		if bytes.Contains([]byte(e), []byte(" ERR ")) {
			bad++
		} else {
			good++
		}
	}
	if good < 30 || bad < 30 {
		t.Errorf("good %d, bad %d: %q", good, bad, events)
	}
}
