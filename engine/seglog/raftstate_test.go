package seglog

import (
	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

func TestSendsFirst(t *testing.T) {
	entries := func(sizes ...int) []pb.Entry {
		var es []pb.Entry
		for i, n := range sizes {
			es = append(es, pb.Entry{Index: uint64(i + 1), Cmd: make([]byte, n)})
		}
		return es
	}
	replicate := []pb.Message{{Type: pb.Heartbeat}, {Type: pb.Replicate}}
	for _, tc := range []struct {
		name    string
		updates []pb.Update
		want    bool
	}{
		{"a leader's small save that replicates", []pb.Update{{EntriesToSave: entries(40), Messages: replicate}}, true},
		{"replicates in a later update", []pb.Update{{EntriesToSave: entries(40)}, {Messages: replicate}}, true},
		{"at the limit", []pb.Update{{EntriesToSave: entries(yieldMaxBytes/2, yieldMaxBytes/2), Messages: replicate}}, true},
		{"over the limit across updates", []pb.Update{{EntriesToSave: entries(yieldMaxBytes)}, {EntriesToSave: entries(1), Messages: replicate}}, false},
		{"a follower's save: its ack goes after it", []pb.Update{{EntriesToSave: entries(40), Messages: []pb.Message{{Type: pb.ReplicateResp}}}}, false},
		{"nothing to send", []pb.Update{{EntriesToSave: entries(40)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sendsFirst(tc.updates); got != tc.want {
				t.Fatalf("sendsFirst = %v, want %v", got, tc.want)
			}
		})
	}
}
