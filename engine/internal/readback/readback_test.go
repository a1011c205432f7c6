package readback

import (
	"reflect"
	"strings"
	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

func encode(t *testing.T, e pb.Entry) []byte {
	t.Helper()
	data, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// entry is an entry at index whose SizeUpperLimit is about 100 bytes.
func entry(index uint64) pb.Entry {
	return pb.Entry{Index: index, Term: 1, Cmd: make([]byte, 60)}
}

func TestAdd(t *testing.T) {
	e := entry(1)
	unit := uint64(e.SizeUpperLimit())
	tests := []struct {
		name     string
		ents     []pb.Entry // the caller's
		size     uint64     // the caller's
		maxSize  uint64
		stored   uint64   // entries 1..stored
		want     []uint64 // the indexes of Entries
		fullAt   uint64   // the entry Add reports full at, 0: none
		wantSize uint64
		budget   uint64 // at the start
	}{
		{
			name: "all fit", maxSize: 10 * unit, stored: 3,
			want: []uint64{1, 2, 3}, wantSize: 3 * unit, budget: 10 * unit,
		},
		{
			name: "exactly maxSize is not past it", maxSize: 3 * unit, stored: 3,
			want: []uint64{1, 2, 3}, wantSize: 3 * unit, budget: 3 * unit,
		},
		{
			name: "the entry that passes maxSize is the last, and included", maxSize: 2*unit + 1, stored: 5,
			want: []uint64{1, 2, 3}, fullAt: 3, wantSize: 3 * unit, budget: 2*unit + 1,
		},
		{
			name: "one entry larger than maxSize is returned", maxSize: 1, stored: 5,
			want: []uint64{1}, fullAt: 1, wantSize: unit, budget: 1,
		},
		{
			name: "appended to the caller's, counted from the caller's size", ents: []pb.Entry{{Index: 99}},
			size: 5 * unit, maxSize: 6*unit + 1, stored: 5,
			want: []uint64{99, 1, 2}, fullAt: 2, wantSize: 7 * unit, budget: unit + 1,
		},
		{
			name: "a caller's size past maxSize still gives one entry", size: 9, maxSize: 8, stored: 5,
			want: []uint64{1}, fullAt: 1, wantSize: 9 + unit, budget: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Start(tt.ents, tt.size, 1, tt.maxSize)
			if b := r.Budget(); b != tt.budget {
				t.Fatalf("Budget %d at the start, want %d", b, tt.budget)
			}
			for i := uint64(1); i <= tt.stored; i++ {
				if r.Next() != i {
					t.Fatalf("Next %d, want %d", r.Next(), i)
				}
				full, err := r.Add(encode(t, entry(i)))
				if err != nil {
					t.Fatal(err)
				}
				if full != (i == tt.fullAt) {
					t.Fatalf("entry %d: full %v", i, full)
				}
				if full {
					if r.Budget() != 0 {
						t.Fatalf("Budget %d when full", r.Budget())
					}
					break
				}
			}
			var got []uint64
			for _, e := range r.Entries {
				got = append(got, e.Index)
			}
			if !reflect.DeepEqual(got, tt.want) || r.Size != tt.wantSize {
				t.Fatalf("entries %v, size %d; want %v, %d", got, r.Size, tt.want, tt.wantSize)
			}
		})
	}
}

func TestAddErrors(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"another index", encode(t, entry(8)), "entry 7 read back with index 8"},
		{"not an entry", []byte{0xff, 0xff, 0xff}, "entry 7: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Start(nil, 0, 7, 1<<20)
			if _, err := r.Add(tt.data); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if len(r.Entries) != 0 || r.Size != 0 || r.Next() != 7 {
				t.Fatalf("a failed Add changed the result: %+v", r)
			}
		})
	}
}

// The entry read back does not keep the data it was decoded from.
func TestAddCopies(t *testing.T) {
	data := encode(t, pb.Entry{Index: 1, Cmd: []byte("command")})
	r := Start(nil, 0, 1, 1<<20)
	if _, err := r.Add(data); err != nil {
		t.Fatal(err)
	}
	clear(data)
	if got := string(r.Entries[0].Cmd); got != "command" {
		t.Fatalf("Cmd %q after its data was overwritten", got)
	}
}
