package engine

import (
	"fmt"
	"testing"

	sm "github.com/baton-dev/baton/statemachine"
)

// The keyState of a key just granted is parked, so that its release finds
// it; a shard parks at most maxParked, the oldest pushed out first, and a
// released key's keyState goes at once.
func TestParkedKeyStates(t *testing.T) {
	s := testShard(t)
	cs := newConn()
	const n = maxParked + 100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		request(t, s, cs, "A "+keys[i]+" 10000 0")
	}
	p, cmds := take(t, s)
	want := make([]sm.Result, n)
	for i := range want {
		want[i] = sm.Result{Code: sm.Granted}
	}
	apply(s, p, cmds, want...)
	if got := answers(cs); len(got) != n {
		t.Fatalf("%d answers, want %d", len(got), n)
	}
	s.mu.Lock()
	parked, first, last := len(s.keys), s.keys[keys[0]], s.keys[keys[n-1]]
	s.mu.Unlock()
	if parked != maxParked || first != nil || last == nil || !last.parked {
		t.Fatalf("%d keyStates kept (want %d), the oldest kept %v, the newest %+v", parked, maxParked, first != nil, last)
	}
	tok, _ := holderOf(s, keys[n-1])
	request(t, s, cs, fmt.Sprint("R ", keys[n-1], " ", tok))
	s.mu.Lock()
	same := s.keys[keys[n-1]] == last
	s.mu.Unlock()
	if !same {
		t.Fatal("the release of a parked key made a new keyState")
	}
	p, cmds = take(t, s)
	apply(s, p, cmds, sm.Result{Code: sm.Released})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[keys[n-1]] != nil || len(s.keys) != maxParked-1 {
		t.Fatalf("after the release: %d keyStates, the released key's kept %v", len(s.keys), s.keys[keys[n-1]] != nil)
	}
}
