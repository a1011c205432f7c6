package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// TestMemberRealNode runs baton member against a real single-node batond:
// its membership as --peers bootstrapped it once the directory is written,
// an add (a learner that never starts) and its removal, and the refusal of
// the last voter's removal, in text and JSON.
func TestMemberRealNode(t *testing.T) {
	n := benchNode(t)
	addr := []string{"--addr", n.ClientAddr}
	var list struct {
		Members []struct {
			ID     uint64 `json:"id"`
			Raft   string `json:"raft"`
			Client string `json:"client"`
			Role   string `json:"role"`
		} `json:"members"`
	}
	code, out, errs := runArgs(t, nil, append([]string{"member", "list", "--json"}, addr...)...)
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Members) != 1 ||
		list.Members[0].ID != 1 || list.Members[0].Role != "voter" || list.Members[0].Client != n.ClientAddr {
		t.Fatalf("member list --json: exit %d, %q %q", code, out, errs)
	}

	// The add waits for the cluster version and the first directory, a
	// second or two after the node's start, retrying ERR unavailable; a
	// refusal for the version (a node just started) is retried here.
	spare := harness.FreeAddrs(t, 2)
	var id string
	for try := 0; ; try++ {
		code, out, errs = runArgs(t, nil, append([]string{"member", "add", spare[0] + "/" + spare[1], "--json"}, addr...)...)
		if code == 0 || try == 50 || !strings.Contains(errs, "cluster version") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var added struct {
		ID uint64 `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &added) != nil || added.ID != 2 {
		t.Fatalf("member add: exit %d, %q %q", code, out, errs)
	}
	id = "2"
	code, out, _ = runArgs(t, nil, append([]string{"member", "list"}, addr...)...)
	if code != 0 || !strings.Contains(out, "learner") || !strings.Contains(out, spare[1]) {
		t.Errorf("member list after the add: exit %d, %q", code, out)
	}
	if code, out, errs = runArgs(t, nil, append([]string{"member", "remove", id}, addr...)...); code != 0 {
		t.Errorf("member remove %s: exit %d, %q %q", id, code, out, errs)
	}
	code, _, errs = runArgs(t, nil, append([]string{"member", "remove", "1"}, addr...)...)
	if code != 1 || !strings.Contains(errs, "last voter") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("member remove of the last voter: exit %d, %q; want 1 and one line naming the last voter", code, errs)
	}
}
