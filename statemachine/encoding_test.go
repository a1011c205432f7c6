package statemachine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
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
		if len(c.Owner) == 0 {
			c.Owner = nil
		}
	case OpRelease, OpExpire:
		c.LeaseMs, c.Owner, c.Permits = 0, nil, 0
	case OpExtend:
		c.Owner, c.Permits = nil, 0
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
		{"no commands, not a fence", Header{Proposer: 1, Seq: 2}, nil},
		{"fence", Header{Proposer: 1, Seq: 2, Fence: true}, nil},
		{"fence of the largest proposer", Header{Proposer: math.MaxUint64, Seq: math.MaxUint64, Fence: true}, nil},
		{"hand-off request", Header{Proposer: 1, HandOff: true}, nil},
		{"hand-off request with a seq", Header{Proposer: math.MaxUint64, Seq: 7, HandOff: true}, nil},
		{"level report", Header{Proposer: 3, Report: true, Level: FeatureLevel}, nil},
		{"raise", Header{Proposer: math.MaxUint64, Raise: true, Level: math.MaxUint64}, nil},
		{"directory write", Header{Proposer: 2, Directory: true, Blob: []byte("m")}, nil},
		{"directory write of the largest blob", Header{Proposer: math.MaxUint64, Directory: true, Base: math.MaxUint64, Blob: bytes.Repeat([]byte{0xa5}, MaxDirectory)}, nil},
		{"grant", Header{Proposer: math.MaxUint64, Seq: 1}, []Command{grant("a", 1000)}},
		{"grant with owner", Header{}, []Command{grantBy("a", 1000, "client-7f3a")}},
		{"grant with empty owner", Header{}, []Command{{Op: OpGrant, Key: []byte("a"), LeaseMs: 1, Owner: []byte{}}}},
		{"owners and not", Header{}, []Command{
			grantBy("a", 1, "o1"), grant("b", 2), grantBy("c", 3, "\x00\xff"), release("a", 0), grantBy("a", 4, "o1"),
		}},
		{"release any", Header{}, []Command{release("a", 0)}},
		{"release token", Header{}, []Command{release("a", 1<<10|1)}},
		{"extend", Header{}, []Command{extend("a", 5, 86400000)}},
		{"expire", Header{}, []Command{expire("a", 9)}},
		{"extremes", Header{Seq: math.MaxUint64}, []Command{
			grant(long, math.MaxUint32),
			grantBy(long, math.MaxUint32, strings.Repeat("o", MaxOwnerLen)),
			extend(long, math.MaxUint64, math.MaxUint32),
			expire("\xff", math.MaxUint64),
			release("x", math.MaxUint64),
		}},
		{"unused fields are not encoded", Header{}, []Command{
			{Op: OpGrant, Key: []byte("g"), Token: 99, LeaseMs: 3},
			{Op: OpRelease, Key: []byte("r"), Token: 4, LeaseMs: 99, Owner: []byte("o"), Permits: 3},
			{Op: OpExtend, Key: []byte("x"), Token: 4, LeaseMs: 99, Owner: []byte("o"), Permits: 3},
			{Op: OpExpire, Key: []byte("e"), Token: 5, LeaseMs: 99, Owner: []byte("o"), Permits: 3},
		}},
		// Version 8: a shared Grant, with an owner or not, beside the
		// other ops and owned exclusive Grants.
		{"shared grant", Header{Proposer: 1, Seq: 2}, []Command{grantShared("a", 3, 1000, "")}},
		{"shared grant with owner", Header{}, []Command{grantShared("a", 1, 1000, "reader-1")}},
		{"shared grant with empty owner", Header{}, []Command{{Op: OpGrant, Key: []byte("a"), LeaseMs: 1, Owner: []byte{}, Permits: 2}}},
		{"shared and owned and not", Header{Seq: 9}, []Command{
			grantShared("a", 2, 1, "o1"), grantBy("b", 2, "o2"), grant("c", 3), grantShared("a", 2, 1, ""),
			release("a", 0), extend("a", 1025, 5), expire("a", 2049),
		}},
		{"shared extremes", Header{Seq: math.MaxUint64}, []Command{
			grantShared(long, MaxPermits, math.MaxUint32, strings.Repeat("o", MaxOwnerLen)),
			grantShared("\xff", 1, 0, ""),
		}},
		{"shared grant with a token", Header{}, []Command{{Op: OpGrant, Key: []byte("s"), Token: 99, LeaseMs: 3, Permits: 7}}},
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
			if v := wantVersion(tc.h, tc.cmds); data[0] != v {
				t.Fatalf("Seal wrote version %d, want %d", data[0], v)
			} else if oracle := encodeVersion(v, tc.h, tc.cmds...); !bytes.Equal(data, oracle) {
				t.Fatalf("Seal wrote\n%x\nwant\n%x", data, oracle)
			}
			h, cmds, err := DecodeBatch(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			// A version 8 entry decodes to a header marked for it.
			if tc.h.shared = data[0] == encVersionShared; h.shared != tc.h.shared {
				t.Errorf("decoded shared %v from version %d", h.shared, data[0])
			}
			if !reflect.DeepEqual(h, tc.h) {
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

// wantVersion is the version Seal must write for h and cmds: 3 if and only
// if h is a fence, else 2 if and only if a Grant has an owner.
func wantVersion(h Header, cmds []Command) byte {
	if h.Fence {
		return encVersionFence
	}
	if h.HandOff {
		return encVersionHandOff
	}
	if h.Report {
		return encVersionReport
	}
	if h.Raise {
		return encVersionRaise
	}
	if h.Directory {
		return encVersionDirectory
	}
	for _, c := range cmds {
		if c.Op == OpGrant && c.Permits > 0 {
			return encVersionShared
		}
	}
	for _, c := range cmds {
		if c.Op == OpGrant && len(c.Owner) > 0 {
			return encVersion
		}
	}
	return encVersionNoOwners
}

func TestBatchLayout(t *testing.T) {
	hdr := func(v byte, n byte) []byte {
		return []byte{
			v,                      // version
			2, 1, 0, 0, 0, 0, 0, 0, // proposer
			3, 0, 0, 0, 0, 0, 0, 0, // seq
			n, 0, 0, 0, // count
		}
	}
	fence, handOff := Header{Fence: true}, Header{HandOff: true}
	tests := []struct {
		name string
		kind Header // Fence or HandOff, or neither
		cmds []Command
		want []byte
	}{
		{"fence: version 3", fence, nil, hdr(3, 0)},
		{"hand-off request: version 4", handOff, nil, hdr(4, 0)},
		{"no commands: version 1", Header{}, nil, hdr(1, 0)},
		{"without owners: version 1", Header{}, []Command{extend("ab", 300, 5), grant("c", 200), grant("d", 1)}, bytes.Join([][]byte{
			hdr(1, 3),
			{3, 2, 'a', 'b', 0xac, 0x02, 5}, // extend, keylen, key, token 300, lease 5
			{1, 1, 'c', 0xc8, 0x01},         // grant, keylen, key, lease 200
			{1, 1, 'd', 1},                  // grant, keylen, key, lease 1
		}, nil)},
		{"with an owner: version 2", Header{}, []Command{extend("ab", 300, 5), grantBy("c", 200, "me"), grant("d", 1)}, bytes.Join([][]byte{
			hdr(2, 3),
			{3, 2, 'a', 'b', 0xac, 0x02, 5},      // extend, keylen, key, token 300, lease 5
			{5, 1, 'c', 0xc8, 0x01, 2, 'm', 'e'}, // owned grant, keylen, key, lease 200, ownerlen, owner
			{1, 1, 'd', 1},                       // grant, keylen, key, lease 1: as in version 1
		}, nil)},
		{"with a shared grant: version 8", Header{}, []Command{grantShared("s", 300, 5, ""), grantBy("c", 200, "me"), grantShared("s", 300, 6, "r1"), grant("d", 1)}, bytes.Join([][]byte{
			hdr(8, 4),
			{6, 1, 's', 0xac, 0x02, 5, 0},           // shared grant, keylen, key, permits 300, lease 5, ownerlen 0
			{5, 1, 'c', 0xc8, 0x01, 2, 'm', 'e'},    // owned grant: as in version 2
			{6, 1, 's', 0xac, 0x02, 6, 2, 'r', '1'}, // shared grant, keylen, key, permits 300, lease 6, ownerlen, owner
			{1, 1, 'd', 1},                          // grant: as in version 1
		}, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			for _, c := range tc.cmds {
				b.Append(c)
			}
			if got := b.Seal(Header{Proposer: 0x0102, Seq: 3, Fence: tc.kind.Fence, HandOff: tc.kind.HandOff}); !bytes.Equal(got, tc.want) {
				t.Fatalf("got  %x\nwant %x", got, tc.want)
			}
		})
	}
}

// v1FixtureHeader and v1FixtureCmds are what testdata/v1-batch.bin holds,
// written by the code before owners.
var (
	v1FixtureHeader = Header{Proposer: 0x0102030405060708, Seq: 42}
	v1FixtureCmds   = []Command{
		grant("orders/42", 10000),
		release("orders/42", 0),
		release("orders/43", 17<<ShardBits|1),
		extend("orders/44", 18<<ShardBits|1, 86400000),
		expire("orders/45", 19<<ShardBits|1),
		grant("z", 0),
	}
)

// TestSealVersion checks that a batch without an owned Grant is sealed in
// version 1, byte for byte what the code before owners wrote (the fixture,
// or encodeV1), so that a replica not yet upgraded applies it, that a
// batch with one is version 2, and that a fence is version 3.
func TestSealVersion(t *testing.T) {
	fixture, err := os.ReadFile("testdata/v1-batch.bin")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("o", MaxOwnerLen)
	tests := []struct {
		name    string
		h       Header
		cmds    []Command
		version byte
		want    []byte // nil: the oracle (encodeV1 or encodeV2) of h, cmds
	}{
		{"the fixture's batch", v1FixtureHeader, v1FixtureCmds, 1, fixture},
		{"barrier", Header{Seq: 1}, nil, 1, nil},
		{"grants without owners", Header{Seq: 2}, []Command{grant("a", 1), grant("b", math.MaxUint32)}, 1, nil},
		{"empty owner is no owner", Header{}, []Command{{Op: OpGrant, Key: []byte("a"), LeaseMs: 1, Owner: []byte{}}}, 1, nil},
		{"owners of other ops are ignored", Header{}, []Command{
			{Op: OpRelease, Key: []byte("r"), Owner: []byte("o")},
			{Op: OpExtend, Key: []byte("x"), Token: 4, LeaseMs: 9, Owner: []byte("o")},
			{Op: OpExpire, Key: []byte("e"), Token: 5, Owner: []byte("o")},
		}, 1, nil},
		{"one owned grant", Header{Seq: 3}, []Command{grantBy("a", 1, "o")}, 2, nil},
		{"owned grant last", Header{}, []Command{grant("a", 1), release("a", 0), grantBy("b", 2, long)}, 2, nil},
		{"owned grant first", Header{}, []Command{grantBy("a", 1, "me"), grant("b", 2), extend("a", 7, 3)}, 2, nil},
		{"one shared grant", Header{Seq: 3}, []Command{grantShared("a", 2, 1, "")}, 8, nil},
		{"shared grant beside owned ones", Header{}, []Command{grantBy("a", 1, "o"), release("a", 0), grantShared("b", 9, 2, "o")}, 8, nil},
		{"permits of other ops are ignored", Header{}, []Command{
			{Op: OpRelease, Key: []byte("r"), Permits: 2},
			{Op: OpExtend, Key: []byte("x"), Token: 4, LeaseMs: 9, Permits: 2},
			{Op: OpExpire, Key: []byte("e"), Token: 5, Permits: 2},
		}, 1, nil},
		{"fence", Header{Proposer: 1, Seq: 4, Fence: true}, nil, 3, nil},
		{"hand-off request", Header{Proposer: 3, HandOff: true}, nil, 4, nil},
		{"level report", Header{Proposer: 2, Report: true, Level: 2}, nil, 5, []byte{
			5, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"raise", Header{Proposer: 1, Raise: true, Level: 0x0102}, nil, 6, []byte{
			6, 1, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = encodeVersion(tc.version, tc.h, tc.cmds...)
			}
			got := encode(tc.h, tc.cmds...)
			if got[0] != tc.version || !bytes.Equal(got, want) {
				t.Fatalf("sealed\n%x\nwant version %d\n%x", got, tc.version, want)
			}
			if tc.version == encVersionNoOwners && !bytes.Equal(got, encodeV1(tc.h, tc.cmds...)) {
				t.Fatal("version 1 is not the encoding from before owners")
			}
			h, cmds, err := DecodeBatch(got, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range cmds {
				if w := normalize(tc.cmds[i]); !reflect.DeepEqual(cmds[i], w) {
					t.Errorf("cmd %d = %+v, want %+v", i, cmds[i], w)
				}
			}
			if again := encode(h, cmds...); !bytes.Equal(again, got) {
				t.Errorf("re-encoding differs:\n%x\n%x", again, got)
			}
		})
	}

	// The version is the batch's, not its buffer's: Reset forgets shared
	// grants and owners.
	var s8 Batch
	s8.Append(grantShared("a", 2, 1, ""))
	if v := s8.Seal(Header{})[0]; v != encVersionShared {
		t.Fatalf("shared batch sealed as version %d", v)
	}
	s8.Reset()
	s8.Append(grantBy("a", 1, "o"))
	if v := s8.Seal(Header{})[0]; v != encVersion {
		t.Fatalf("after Reset, an owned batch sealed as version %d", v)
	}
	var b Batch
	b.Append(grantBy("a", 1, "o"))
	if v := b.Seal(Header{})[0]; v != encVersion {
		t.Fatalf("owned batch sealed as version %d", v)
	}
	b.Reset()
	fence := Header{Proposer: 1, Fence: true}
	if got := b.Seal(fence); !bytes.Equal(got, encodeVersion(encVersionFence, fence)) {
		t.Fatalf("after Reset, a fence sealed as %x", got)
	}
	b.Append(grant("a", 1))
	if got := b.Seal(Header{}); !bytes.Equal(got, encodeV1(Header{}, grant("a", 1))) {
		t.Fatalf("after Reset, an ownerless batch sealed as %x", got)
	}
}

// TestSealPanicsOnInvalidHeaderOnly: a fence or a hand-off request with
// commands, or of proposer 0 (the table's "no fence", no replica's id), or
// both at once, is a caller's bug every replica would reject.
func TestSealPanicsOnInvalidHeaderOnly(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		cmds []Command
	}{
		{"with a command", Header{Proposer: 1, Fence: true}, []Command{release("a", 0)}},
		{"with an owned grant", Header{Proposer: 1, Fence: true}, []Command{grantBy("a", 1, "o")}},
		{"of proposer 0", Header{Seq: 1, Fence: true}, nil},
		{"hand-off request with a command", Header{Proposer: 1, HandOff: true}, []Command{grant("a", 1)}},
		{"hand-off request of replica 0", Header{HandOff: true}, nil},
		{"fence and hand-off request", Header{Proposer: 1, Fence: true, HandOff: true}, nil},
		{"level report with a command", Header{Proposer: 1, Report: true, Level: 2}, []Command{grant("a", 1)}},
		{"level report of replica 0", Header{Report: true, Level: 2}, nil},
		{"level report of level 0", Header{Proposer: 1, Report: true}, nil},
		{"raise with a command", Header{Proposer: 1, Raise: true, Level: 2}, []Command{expire("a", 1)}},
		{"raise of replica 0", Header{Raise: true, Level: 2}, nil},
		{"raise to level 0", Header{Proposer: 1, Raise: true}, nil},
		{"report and raise", Header{Proposer: 1, Report: true, Raise: true, Level: 2}, nil},
		{"fence and raise", Header{Proposer: 1, Fence: true, Raise: true, Level: 2}, nil},
		{"hand-off request and report", Header{Proposer: 1, HandOff: true, Report: true, Level: 2}, nil},
		{"directory write with a command", Header{Proposer: 1, Directory: true, Blob: []byte("m")}, []Command{grant("a", 1)}},
		{"directory write of replica 0", Header{Directory: true, Blob: []byte("m")}, nil},
		{"directory write without a blob", Header{Proposer: 1, Directory: true}, nil},
		{"directory write of a blob too long", Header{Proposer: 1, Directory: true, Blob: make([]byte, MaxDirectory+1)}, nil},
		{"directory write and fence", Header{Proposer: 1, Directory: true, Fence: true, Blob: []byte("m")}, nil},
		{"directory write and raise", Header{Proposer: 1, Directory: true, Raise: true, Level: 3, Blob: []byte("m")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Seal(%+v) with %d commands did not panic", tc.h, len(tc.cmds))
				}
			}()
			var b Batch
			for _, c := range tc.cmds {
				b.Append(c)
			}
			b.Seal(tc.h)
		})
	}
}

// TestDecodeBatchVersion1 reads entries as the code before owners wrote
// them (testdata/v1-batch.bin is one, written by that code; encodeV1 is an
// independent writer of the format): their Grants have no owner, and
// re-encoding gives the very same bytes.
func TestDecodeBatchVersion1(t *testing.T) {
	fixture, err := os.ReadFile("testdata/v1-batch.bin")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		h    Header
		cmds []Command
	}{
		{"written before owners", fixture, v1FixtureHeader, v1FixtureCmds},
		{"barrier", encodeV1(Header{Seq: 1}), Header{Seq: 1}, nil},
		{"owners dropped", encodeV1(Header{}, grantBy("a", 5, "o1")), Header{}, []Command{grant("a", 5)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if again := encodeV1(tc.h, tc.cmds...); !bytes.Equal(again, tc.data) {
				t.Fatalf("encodeV1 differs from the input:\n%x\n%x", again, tc.data)
			}
			h, cmds, err := DecodeBatch(tc.data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h, tc.h) || !reflect.DeepEqual(cmds, tc.cmds) {
				t.Fatalf("decoded %+v %+v, want %+v %+v", h, cmds, tc.h, tc.cmds)
			}
			if again := encode(h, cmds...); !bytes.Equal(again, tc.data) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, tc.data)
			}
		})
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
	owned := grantBy("key", 1, strings.Repeat("o", MaxOwnerLen))
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		for i := 0; i < 100; i++ {
			b.Append(grant("key", 1))
			b.Append(owned)
		}
		b.Seal(Header{})
	})
	if allocs != 0 {
		t.Errorf("refilling a Batch allocates %v times", allocs)
	}
}

// TestBatchGrow: a batch grown to the size of an earlier one builds the
// same entry with one allocation, the Grow, instead of one per doubling.
func TestBatchGrow(t *testing.T) {
	cmds := []Command{grant("key", 1), grantBy("k2", 1, "owner")}
	fill := func(b *Batch) []byte {
		for i := 0; i < 100; i++ {
			b.Append(cmds[0])
			b.Append(cmds[1])
		}
		return b.Seal(Header{Seq: 7})
	}
	var plain Batch
	want := fill(&plain)
	var grown Batch
	grown.Grow(len(want))
	if got := fill(&grown); !bytes.Equal(got, want) {
		t.Fatalf("grown batch encodes differently:\n%x\n%x", got, want)
	}
	var b Batch
	if allocs := testing.AllocsPerRun(20, func() {
		b = Batch{}
		b.Grow(len(want))
		fill(&b)
	}); allocs != 1 {
		t.Errorf("a batch grown to its size allocates %v times, want 1", allocs)
	}
	var small Batch
	small.Grow(1) // less than a header: still room for the header and the byte
	small.Append(release("k", 3))
	if _, cmds, err := DecodeBatch(small.Seal(Header{Seq: 1}), nil); err != nil || len(cmds) != 1 {
		t.Fatalf("batch grown by 1: %v %+v", err, cmds)
	}
}

func TestAppendPanicsOnInvalidCommand(t *testing.T) {
	for _, c := range []Command{
		{Op: 0, Key: []byte("k")},
		{Op: 5, Key: []byte("k")},
		{Op: OpGrant},
		{Op: OpGrant, Key: make([]byte, MaxKeyLen+1)},
		{Op: OpGrant, Key: []byte("k"), Owner: make([]byte, MaxOwnerLen+1)},
		{Op: OpGrant, Key: []byte("k"), Permits: MaxPermits + 1},
		{Op: OpGrant, Key: []byte("k"), Permits: 1, Owner: make([]byte, MaxOwnerLen+1)},
		{Op: 6, Key: []byte("k"), Permits: 1},
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
	hdrV := func(v byte, n uint32) []byte {
		h := make([]byte, headerLen)
		h[0] = v
		binary.LittleEndian.PutUint32(h[17:], n)
		return h
	}
	hdr1 := func(n uint32) []byte { return hdrV(encVersionNoOwners, n) }
	hdr2 := func(n uint32) []byte { return hdrV(encVersion, n) }
	hdr8 := func(n uint32) []byte { return hdrV(encVersionShared, n) }
	// hdr3 is a fence's header with proposer 1 and count n.
	hdr3 := func(n uint32) []byte {
		h := hdrV(encVersionFence, n)
		h[1] = 1
		return h
	}
	// hdr4 is a hand-off request's header, of replica 2, with count n.
	hdr4 := func(n uint32) []byte {
		h := hdrV(encVersionHandOff, n)
		h[1] = 2
		return h
	}
	// hdrL is a level report's or raise's header (version v), of replica
	// r, level 2, with count n.
	hdrL := func(v byte, r byte, n uint32) []byte {
		h := hdrV(v, n)
		h[1], h[9] = r, 2
		return h
	}
	// hdr7 is a directory write's header, of replica 2, base 1, with
	// count n; the blob's length and bytes follow it.
	hdr7 := func(n uint32) []byte {
		h := hdrV(encVersionDirectory, n)
		h[1], h[9] = 2, 1
		return h
	}
	levelZero := func(v byte) []byte {
		h := hdrL(v, 1, 0)
		h[9] = 0
		return h
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	valid := encode(Header{}, grant("k", 1))
	ownerless := encode(Header{Seq: 5}, grant("a", 1), release("a", 0), extend("b", 1025, 5), expire("c", 2049))
	owned := encode(Header{Seq: 6}, grant("a", 1), grantBy("b", 2, "o"))
	ownedGrant := []byte{5, 1, 'o', 1, 1, 'o'}     // op 5, key "o", lease 1, owner "o"
	sharedGrant := []byte{6, 1, 's', 2, 1, 1, 'o'} // op 6, key "s", permits 2, lease 1, owner "o"
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, errShort},
		{"short header", valid[:headerLen-1], errShort},
		{"version 0", cat([]byte{0}, valid[1:]), errVersion},
		{"version 9", cat([]byte{9}, valid[1:]), errVersion},
		{"version 255", cat([]byte{255}, valid[1:]), errVersion},

		// A fence is a header alone, with a proposer.
		{"fence with a command", cat(hdr3(1), []byte{1, 1, 'k', 1}), errFenceCmds},
		{"fence with a huge count", cat(hdr3(math.MaxUint32), bytes.Repeat([]byte{1}, 64)), errFenceCmds},
		{"version 3 of a batch", cat([]byte{encVersionFence}, valid[1:]), errFenceCmds},
		{"version 3 of an owned batch", cat([]byte{encVersionFence}, owned[1:]), errFenceCmds},
		{"fence with trailing bytes", cat(hdr3(0), []byte{1, 1, 'k', 1}), errTrailing},
		{"fence with a trailing byte", cat(hdr3(0), []byte{0}), errTrailing},
		{"fence of proposer 0", hdrV(encVersionFence, 0), errFenceProposer},
		{"short fence", hdr3(0)[:headerLen-1], errShort},

		// So is a hand-off request, with the replica that asks.
		{"hand-off request with a command", cat(hdr4(1), []byte{1, 1, 'k', 1}), errHandOffCmds},
		{"version 4 of a batch", cat([]byte{encVersionHandOff}, valid[1:]), errHandOffCmds},
		{"hand-off request with a trailing byte", cat(hdr4(0), []byte{0}), errTrailing},
		{"hand-off request of replica 0", hdrV(encVersionHandOff, 0), errHandOffProposer},
		{"short hand-off request", hdr4(0)[:headerLen-1], errShort},

		// So are a level report and a raise, with the replica and a level.
		{"level report with a command", cat(hdrL(encVersionReport, 2, 1), []byte{1, 1, 'k', 1}), errLevelCmds},
		{"version 5 of a batch", cat([]byte{encVersionReport}, valid[1:]), errLevelCmds},
		{"level report with a trailing byte", cat(hdrL(encVersionReport, 2, 0), []byte{0}), errTrailing},
		{"level report of replica 0", hdrL(encVersionReport, 0, 0), errLevelProposer},
		{"level report of level 0", levelZero(encVersionReport), errLevelZero},
		{"raise with a command", cat(hdrL(encVersionRaise, 2, 1), []byte{4, 1, 'k', 1}), errLevelCmds},
		{"version 6 of a batch", cat([]byte{encVersionRaise}, valid[1:]), errLevelCmds},
		{"raise of replica 0", hdrL(encVersionRaise, 0, 0), errLevelProposer},
		{"raise to level 0", levelZero(encVersionRaise), errLevelZero},
		{"short raise", hdrL(encVersionRaise, 1, 0)[:headerLen-1], errShort},

		// A directory write is a header, with the replica, and a blob of
		// 1..MaxDirectory bytes that ends the entry.
		{"directory write with a command", cat(hdr7(1), []byte{1, 'm'}, []byte{1, 1, 'k', 1}), errDirCmds},
		{"version 7 of a batch", cat([]byte{encVersionDirectory}, valid[1:]), errDirCmds},
		{"directory write of replica 0", cat(hdrV(encVersionDirectory, 0), []byte{1, 'm'}), errDirProposer},
		{"directory write without a blob", hdr7(0), errVarint},
		{"directory write of an empty blob", cat(hdr7(0), []byte{0}), errDirLen},
		{"directory write of a blob too long", cat(hdr7(0), binary.AppendUvarint(nil, MaxDirectory+1), make([]byte, MaxDirectory+1)), errDirLen},
		{"directory write of a huge blob length", cat(hdr7(0), []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, []byte("m")), errDirLen},
		{"directory write with a non-minimal blob length", cat(hdr7(0), []byte{0x81, 0x00, 'm'}), errVarint},
		{"directory write with a blob cut short", cat(hdr7(0), []byte{3, 'm', 'm'}), errTrunc},
		{"directory write with a trailing byte", cat(hdr7(0), []byte{1, 'm', 0}), errTrailing},
		{"short directory write", hdr7(0)[:headerLen-1], errShort},

		// One encoding per batch: version 2 if and only if a Grant has
		// an owner, and an owner only in an owned Grant (op 5).
		{"version 2 without an owner", cat([]byte{encVersion}, ownerless[1:]), errNoOwner},
		{"version 2 barrier", hdr2(0), errNoOwner},
		{"version 2 grant without an owner", cat(hdr2(1), []byte{1, 1, 'k', 1}), errNoOwner},
		{"version 2 grant with an empty owner field", cat(hdr2(1), []byte{1, 1, 'k', 1, 0}), errTrailing},
		{"version 1 with an owned grant", cat([]byte{encVersionNoOwners}, owned[1:]), errOwnerV1},
		{"version 1 with op 5 only", cat(hdr1(1), ownedGrant), errOwnerV1},
		{"version 1 with an owner length", cat(hdr1(1), []byte{1, 1, 'k', 1, 0}), errTrailing},
		{"version 1 with an owner", cat(hdr1(1), []byte{1, 1, 'k', 1, 1, 'o'}), errTrailing},
		{"owned grant with owner length 0", cat(hdr2(1), []byte{5, 1, 'k', 1, 0}), errOwnerLen},
		{"owned grant with owner length 0 beside an owner", cat(hdr2(2), ownedGrant, []byte{5, 1, 'k', 1, 0}), errOwnerLen},

		// One encoding per batch: version 8 if and only if a Grant is
		// shared (op 6); it may have owned Grants (op 5) too.
		{"version 8 without a shared grant", cat([]byte{encVersionShared}, owned[1:]), errNoShared},
		{"version 8 of an ownerless batch", cat([]byte{encVersionShared}, ownerless[1:]), errNoShared},
		{"version 8 barrier", hdr8(0), errNoShared},
		{"op 6 in version 1", cat(hdr1(1), sharedGrant), errOp},
		{"op 6 in version 2", cat(hdr2(2), ownedGrant, sharedGrant), errOp},
		{"shared grant of permits 0", cat(hdr8(1), []byte{6, 1, 'k', 0, 1, 0}), errPermits},
		{"shared grant of permits 1000001", cat(hdr8(1), []byte{6, 1, 'k'}, binary.AppendUvarint(nil, MaxPermits+1), []byte{1, 0}), errPermits},
		{"shared grant of huge permits", cat(hdr8(1), []byte{6, 1, 'k', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 0}), errPermits},
		{"shared grant with non-minimal permits", cat(hdr8(1), []byte{6, 1, 'k', 0x81, 0x00, 1, 0}), errVarint},
		{"shared grant with unterminated permits", cat(hdr8(1), []byte{6, 1, 'k', 0x80}), errVarint},
		{"shared grant missing lease", cat(hdr8(1), []byte{6, 1, 'k', 2}), errVarint},
		{"shared grant lease over 32 bits", cat(hdr8(1), []byte{6, 1, 'k', 2, 0x80, 0x80, 0x80, 0x80, 0x10, 0}), errLease},
		{"shared grant missing owner length", cat(hdr8(1), []byte{6, 1, 'k', 2, 1}), errVarint},
		{"shared grant with non-minimal owner length", cat(hdr8(1), []byte{6, 1, 'k', 2, 1, 0x80, 0x00}), errVarint},
		{"shared grant owner length 65", cat(hdr8(1), []byte{6, 1, 'k', 2, 1, 65}, bytes.Repeat([]byte{'o'}, 65)), errOwnerLen},
		{"shared grant owner past end", cat(hdr8(1), []byte{6, 1, 'k', 2, 1, 3, 'o'}), errTrunc},
		{"shared grant key length 0", cat(hdr8(1), []byte{6, 0, 2, 1, 0}), errKeyLen},
		{"trailing byte after a shared grant", cat(hdr8(1), sharedGrant, []byte{0}), errTrailing},
		{"owned grant with owner length 0 in version 8", cat(hdr8(2), sharedGrant, []byte{5, 1, 'k', 1, 0}), errOwnerLen},

		{"count larger than data", cat(hdr1(2), valid[headerLen:]), errCount},
		{"huge count", cat(hdr1(math.MaxUint32), bytes.Repeat([]byte{1}, 64)), errCount},
		{"count smaller than data", cat(hdr1(0), valid[headerLen:]), errTrailing},
		{"trailing byte", cat(valid, []byte{0}), errTrailing},
		{"trailing byte after an owner", cat(owned, []byte{0}), errTrailing},
		{"op 0", cat(hdr1(1), []byte{0, 1, 'k', 1}), errOp},
		{"op 6", cat(hdr2(2), ownedGrant, []byte{6, 1, 'k', 1}), errOp},
		{"key length 0", cat(hdr1(1), []byte{1, 0, 1, 1}), errKeyLen},
		{"owned grant key length 0", cat(hdr2(1), []byte{5, 0, 1, 1, 'o'}), errKeyLen},
		{"key length 251", cat(hdr1(1), []byte{1, 0xfb, 0x01}, bytes.Repeat([]byte{'k'}, 251), []byte{1}), errKeyLen},
		{"key past end", cat(hdr1(1), []byte{1, 9, 'k', 1}), errTrunc},
		{"missing lease", cat(hdr1(1), []byte{1, 2, 'k', 'k'}), errVarint},
		{"owned grant missing lease", cat(hdr2(1), []byte{5, 2, 'k', 'k'}), errVarint},
		{"missing owner length", cat(hdr2(1), []byte{5, 1, 'k', 1}), errVarint},
		{"owner past end", cat(hdr2(1), []byte{5, 1, 'k', 1, 3, 'o', 'o'}), errTrunc},
		{"owner length 65", cat(hdr2(1), []byte{5, 1, 'k', 1, 65}, bytes.Repeat([]byte{'o'}, 65)), errOwnerLen},
		{"huge owner length", cat(hdr2(1), []byte{5, 1, 'k', 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, bytes.Repeat([]byte{'o'}, 8)), errOwnerLen},
		{"non-minimal owner length", cat(hdr2(1), []byte{5, 1, 'k', 1, 0x81, 0x00, 'o'}), errVarint},
		{"non-minimal empty owner length", cat(hdr2(1), []byte{5, 1, 'k', 1, 0x80, 0x00}), errVarint},
		{"unterminated varint", cat(hdr1(1), []byte{2, 1, 'k', 0x80}), errVarint},
		{"unterminated owner length", cat(hdr2(1), []byte{5, 1, 'k', 1, 0x80}), errVarint},
		{"non-minimal varint", cat(hdr1(1), []byte{2, 1, 'k', 0x81, 0x00}), errVarint},
		{"non-minimal key length", cat(hdr1(1), []byte{2, 0x81, 0x00, 'k', 1}), errVarint},
		{"varint overflow", cat(hdr1(1), []byte{4, 1, 'k'}, bytes.Repeat([]byte{0xff}, 10), []byte{1}), errVarint},
		{"lease over 32 bits", cat(hdr1(1), []byte{1, 1, 'k', 0x80, 0x80, 0x80, 0x80, 0x10}), errLease},
		{"owned grant lease over 32 bits", cat(hdr2(1), []byte{5, 1, 'k', 0x80, 0x80, 0x80, 0x80, 0x10, 1, 'o'}), errLease},
		{"extend missing lease", cat(hdr1(1), []byte{3, 1, 'k', 5}), errVarint},
		{"second command truncated", cat(hdr1(2), valid[headerLen:], []byte{2, 3, 'k', 'k'}), errTrunc},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prev := []Command{grant("keep", 1)}
			h, cmds, err := DecodeBatch(tc.data, prev)
			if !errors.Is(err, ErrMalformed) || !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v (ErrMalformed)", err, tc.want)
			}
			if !reflect.DeepEqual(h, Header{}) || len(cmds) != 1 || string(cmds[0].Key) != "keep" {
				t.Errorf("on error got %+v %+v, want the input commands untouched", h, cmds)
			}
		})
	}
}

func TestDecodeBatchAppendsAndAliases(t *testing.T) {
	data := encode(Header{Seq: 4}, grantBy("a", 1, "ow"), release("bb", 2))
	cmds, err := decodeAll(t, data, []Command{expire("z", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 3 || string(cmds[0].Key) != "z" || string(cmds[2].Key) != "bb" || string(cmds[1].Owner) != "ow" {
		t.Fatalf("got %+v", cmds)
	}
	// op, keylen, key, lease, ownerlen, owner
	if &cmds[1].Key[0] != &data[headerLen+2] || &cmds[1].Owner[0] != &data[headerLen+5] {
		t.Error("decoded key or owner does not alias the entry")
	}
	if cap(cmds[1].Key) != len(cmds[1].Key) || cap(cmds[1].Owner) != len(cmds[1].Owner) {
		t.Error("decoded key's or owner's capacity reaches into the next command")
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
// accepts is the one encoding of its commands: Append and Seal give the
// very same bytes (so the version is 2 exactly when a Grant has an owner,
// 3 exactly for a fence and 4 for a hand-off request, which have no
// commands and a proposer), version 1
// is also what the code before owners wrote (encodeV1), and it decodes
// again to the same commands.
func FuzzDecodeBatch(f *testing.F) {
	if v1, err := os.ReadFile("testdata/v1-batch.bin"); err != nil {
		f.Fatal(err)
	} else {
		f.Add(v1)
	}
	f.Add(encode(Header{}))
	f.Add(encode(Header{Proposer: 1, Seq: 2}, grant("a", 1000), release("a", 0), extend("b", 1025, 5), expire("c", 2049)))
	f.Add(encode(Header{Seq: math.MaxUint64}, grant(strings.Repeat("x", MaxKeyLen), math.MaxUint32)))
	f.Add(encode(Header{Seq: 3}, grantBy("a", 1000, "owner"), grant("b", 1), grantBy("c", 5, strings.Repeat("o", MaxOwnerLen))))
	f.Add(encode(Header{Seq: 4}, release("a", 0), grantBy("b", 1, "\x00\xff")))
	// Not canonical: version 2 without an owner, version 1 with one, an
	// owned Grant with an empty owner, the layout of an earlier draft.
	f.Add(encodeV2(Header{Proposer: 1, Seq: 2}, grant("a", 1000), release("a", 0)))
	f.Add(encodeV2(Header{}))
	f.Add(encodeVersion(encVersionNoOwners, Header{}, release("a", 0)))
	f.Add(bytes.Join([][]byte{encodeV1(Header{}, grant("a", 1)), {5, 1, 'b', 1, 1, 'o'}}, nil))
	f.Add(bytes.Join([][]byte{encodeV2(Header{}, grantBy("a", 1, "o"))[:headerLen], {5, 1, 'b', 1, 0}}, nil))
	f.Add(bytes.Join([][]byte{encodeV2(Header{}, grant("a", 1))[:headerLen], {1, 1, 'b', 1, 0}}, nil))
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{2, 0, 0})
	// Fences, and what a fence must not be: with commands, of proposer 0,
	// with bytes after the header.
	f.Add(encode(Header{Proposer: 3, Seq: 9, Fence: true}))
	f.Add(encodeVersion(encVersionFence, Header{Proposer: 3}, grant("a", 1)))
	f.Add(encodeVersion(encVersionFence, Header{Seq: 1}))
	f.Add(bytes.Join([][]byte{encode(Header{Proposer: 3, Fence: true}), {0}}, nil))
	f.Add([]byte{3, 0, 0})
	// Hand-off requests, and what one must not be.
	f.Add(encode(Header{Proposer: 2, HandOff: true}))
	f.Add(encodeVersion(encVersionHandOff, Header{Proposer: 2}, release("a", 0)))
	f.Add(encodeVersion(encVersionHandOff, Header{Seq: 1}))
	f.Add([]byte{4, 0, 0})
	// Level reports and raises, and what they must not be.
	f.Add(encode(Header{Proposer: 2, Report: true, Level: 2}))
	f.Add(encode(Header{Proposer: 1, Raise: true, Level: 3}))
	f.Add(encodeVersion(encVersionRaise, Header{Proposer: 1, Level: 2}, expire("a", 1)))
	f.Add(encodeVersion(encVersionReport, Header{Proposer: 1}))
	f.Add(encodeVersion(encVersionRaise, Header{Level: 2}))
	f.Add([]byte{6, 1, 0})
	// Directory writes, and what they must not be.
	f.Add(SealDirectory(2, 0, []byte("members")))
	f.Add(SealDirectory(math.MaxUint64, math.MaxUint64, bytes.Repeat([]byte{0xff}, 300)))
	f.Add(encodeVersion(encVersionDirectory, Header{Proposer: 2, Blob: []byte("m")}, grant("a", 1)))
	f.Add(encodeVersion(encVersionDirectory, Header{Base: 1, Blob: []byte("m")}))
	f.Add(encodeVersion(encVersionDirectory, Header{Proposer: 2}))
	f.Add(bytes.Join([][]byte{SealDirectory(2, 1, []byte("m")), {0}}, nil))
	f.Add([]byte{7, 1, 0})
	// Version 8, and what it must not be.
	f.Add(encode(Header{Seq: 8}, grantShared("a", 3, 1000, ""), grantShared("a", 3, 1000, "r"), grantBy("b", 1, "o"), release("a", 0)))
	f.Add(encode(Header{Proposer: 1}, grantShared(strings.Repeat("s", MaxKeyLen), MaxPermits, math.MaxUint32, strings.Repeat("o", MaxOwnerLen))))
	f.Add(encodeVersion(encVersionShared, Header{}, grantBy("a", 1, "o")))
	f.Add(encodeVersion(encVersionShared, Header{}))
	f.Add(bytes.Join([][]byte{encodeV2(Header{}, grantBy("a", 1, "o")), {6, 1, 's', 2, 1, 0}}, nil))
	f.Add(bytes.Join([][]byte{encodeVersion(encVersionShared, Header{}, grantShared("a", 1, 1, ""))[:headerLen], {6, 1, 's', 0, 1, 0}}, nil))
	f.Add([]byte{8, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, cmds, err := DecodeBatch(data, nil)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || len(cmds) != 0 {
				t.Fatalf("error %v with %d commands", err, len(cmds))
			}
			return
		}
		owned, shared := false, false
		for _, c := range cmds {
			if c.Owner != nil && (c.Op != OpGrant || len(c.Owner) == 0 || len(c.Owner) > MaxOwnerLen) {
				t.Fatalf("version %d: %+v has owner %q", data[0], c, c.Owner)
			}
			if c.Permits != 0 && (c.Op != OpGrant || c.Permits > MaxPermits) {
				t.Fatalf("version %d: %+v has permits %d", data[0], c, c.Permits)
			}
			owned = owned || c.Owner != nil && c.Permits == 0
			shared = shared || c.Permits != 0
		}
		if shared != (data[0] == encVersionShared) || owned && data[0] != encVersion && data[0] != encVersionShared ||
			!owned && data[0] == encVersion {
			t.Fatalf("version %d entry, owners: %v, shared: %v", data[0], owned, shared)
		}
		if h.shared != (data[0] == encVersionShared) {
			t.Fatalf("version %d entry decoded as shared: %v", data[0], h.shared)
		}
		headerOnly := h.kinds() > 0
		level := h.Report || h.Raise
		if h.Fence != (data[0] == encVersionFence) || h.HandOff != (data[0] == encVersionHandOff) ||
			h.Report != (data[0] == encVersionReport) || h.Raise != (data[0] == encVersionRaise) ||
			headerOnly && (len(cmds) != 0 || h.Proposer == 0) || level && (h.Level == 0 || h.Seq != 0) || !level && h.Level != 0 ||
			h.Directory != (data[0] == encVersionDirectory) ||
			h.Directory && (h.Seq != 0 || len(h.Blob) == 0 || len(h.Blob) > MaxDirectory) || !h.Directory && (h.Base != 0 || h.Blob != nil) {
			t.Fatalf("version %d entry decoded to %+v with %d commands", data[0], h, len(cmds))
		}
		again := encode(h, cmds...)
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, data)
		}
		if oracle := encodeVersion(data[0], h, cmds...); !bytes.Equal(oracle, data) {
			t.Fatalf("version %d oracle differs:\n%x\n%x", data[0], oracle, data)
		}
		h2, cmds2, err := DecodeBatch(again, nil)
		if err != nil || !reflect.DeepEqual(h2, h) || !reflect.DeepEqual(cmds, cmds2) {
			t.Fatalf("second decode: %v %+v %+v", err, h2, cmds2)
		}
	})
}
