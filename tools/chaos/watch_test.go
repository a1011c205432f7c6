package chaos

import (
	"strings"
	"testing"

	"github.com/baton-dev/baton/codec"
)

// TestCheckWatches: the watch checker flags a session whose tokens do not
// grow and one that skipped a grant the history shows, and passes sessions
// that start again with a later state (a new session may fold changes).
func TestCheckWatches(t *testing.T) {
	grant := func(key string, tok uint64) Op {
		return Op{Op: codec.OpAcquire, Key: key, Answered: true, Status: codec.StatusOK, RespToken: tok}
	}
	shared := func(key string, tok uint64) Op {
		return Op{Op: codec.OpShared, Key: key, Answered: true, Status: codec.StatusOK, RespToken: tok}
	}
	h := []Op{grant("k", 5), grant("k", 9), grant("k", 13), grant("k", 17), grant("j", 6),
		grant("s", 2), shared("s", 4), shared("s", 6), grant("s", 8),
		{Op: codec.OpAcquire, Key: "k", Answered: true, Status: codec.StatusTimeout}}
	for _, tt := range []struct {
		name     string
		sessions []WatchSession
		want     string // a violation's text, "" for none
	}{
		{"every grant in order", []WatchSession{{Key: "k", States: []uint64{0, 5, 0, 9, 13, 0, 17}}}, ""},
		{"a hand-off: no FREE between", []WatchSession{{Key: "k", States: []uint64{5, 9}}}, ""},
		{"sessions apart may fold changes", []WatchSession{{Key: "k", States: []uint64{5}}, {Key: "k", States: []uint64{13, 17}}}, ""},
		{"a skipped grant", []WatchSession{{Key: "k", States: []uint64{5, 0, 13}}}, "skipped the grant of token 9"},
		{"tokens going back", []WatchSession{{Key: "k", States: []uint64{9, 5}}}, "saw token 5 after 9"},
		{"another key's grants do not count", []WatchSession{{Key: "j", States: []uint64{0, 6}}, {Key: "k", States: []uint64{5, 9}}}, ""},
		{"shared grants in a SHARED line", []WatchSession{{Key: "s", States: []uint64{2, SharedLine, 0, 8}}}, ""},
		{"a shared grant skipped", []WatchSession{{Key: "s", States: []uint64{2, 0, 8}}}, "skipped the shared grant of token 4"},
		{"a shared grant shown as HELD", []WatchSession{{Key: "s", States: []uint64{2, 4}}}, "showed the shared grant 4 as HELD"},
		{"a SHARED line past its permits", []WatchSession{{Key: "s", States: []uint64{SharedLine}, Bad: []string{"W s SHARED 3 2"}}}, `said "W s SHARED 3 2"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckWatches(tt.sessions, h)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Fatalf("violations %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want) || !strings.HasPrefix(got[0], CheckerWatch+": ")):
				t.Fatalf("violations %q, want one saying %q", got, tt.want)
			}
		})
	}
}
