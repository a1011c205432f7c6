package main

import (
	"sort"

	"github.com/baton-dev/baton/engine/stagetrace"
)

// entryKey names a command batch: its shard and its header's proposer
// and sequence number, which every node reads from the entry.
type entryKey struct{ shard, proposer, seq uint64 }

// nodeTimes is when one node met one entry: the first event of each kind
// (0: not seen), and for the leader when it sent the entry to each peer.
type nodeTimes struct {
	at   [stagetrace.Answer + 1]int64
	sent map[uint64]int64
}

// traced is one sampled entry as every node saw it.
type traced struct {
	index  uint64
	leader uint64 // the node that proposed it (0: not seen)
	nodes  map[uint64]*nodeTimes
}

// ackKey names one node's acks of one shard to or from one peer, sent or
// received.
type ackKey struct {
	node, shard, peer uint64
	kind              stagetrace.Kind
}

// ack is one ReplicateResp: when, and up to which index it acknowledges.
type ack struct {
	t     int64
	index uint64
}

// path is one entry's way through the cluster, times on the shared clock
// (0 where unknown): on the leader, and on the follower whose ack reached
// the leader first, the one that made the entry committed.
type path struct {
	read, propose        int64
	lSave, lWrite, lSync int64
	sent, recv           int64
	fSave, fWrite, fSync int64
	ackSent, ackRecv     int64
	commit, update       int64
	apply                int64
	answer               int64
	index, follower      uint64
}

// joined is a round's paths, and how many sampled entries had no leader
// or no follower ack to pair them with.
type joined struct {
	paths      []path
	incomplete int
}

// join pairs the events of a round's nodes into one path per sampled
// entry proposed within its window (all of them when it has none).
func join(r round) joined {
	entries := map[entryKey]*traced{}
	acks := map[ackKey][]ack{}
	for _, nt := range r.nodes {
		for _, e := range nt.events {
			if e.kind == stagetrace.AckSent || e.kind == stagetrace.AckRecv {
				k := ackKey{node: nt.node, shard: e.shard, peer: e.peer, kind: e.kind}
				acks[k] = append(acks[k], ack{t: e.t, index: e.index})
				continue
			}
			k := entryKey{e.shard, e.proposer, e.seq}
			en := entries[k]
			if en == nil {
				en = &traced{nodes: map[uint64]*nodeTimes{}}
				entries[k] = en
			}
			if e.index != 0 {
				en.index = e.index
			}
			nd := en.nodes[nt.node]
			if nd == nil {
				nd = &nodeTimes{}
				en.nodes[nt.node] = nd
			}
			if e.kind == stagetrace.Propose {
				en.leader = nt.node
			}
			if e.kind == stagetrace.Sent {
				if nd.sent == nil {
					nd.sent = map[uint64]int64{}
				}
				if old, ok := nd.sent[e.peer]; !ok || e.t < old {
					nd.sent[e.peer] = e.t
				}
				continue
			}
			if old := nd.at[e.kind]; old == 0 || e.t < old {
				nd.at[e.kind] = e.t
			}
		}
	}
	for k := range acks {
		a := acks[k]
		sort.Slice(a, func(i, j int) bool { return a[i].t < a[j].t })
	}
	var out joined
	for k, en := range entries {
		l := en.nodes[en.leader]
		if en.leader == 0 || en.index == 0 || l.at[stagetrace.Propose] == 0 {
			out.incomplete++
			continue
		}
		if r.to != 0 && (l.at[stagetrace.Propose] < r.from || l.at[stagetrace.Propose] > r.to) {
			continue
		}
		p := path{
			index: en.index,
			read:  l.at[stagetrace.Read], propose: l.at[stagetrace.Propose],
			lSave: l.at[stagetrace.Save], lWrite: l.at[stagetrace.Write], lSync: l.at[stagetrace.Sync],
			commit: l.at[stagetrace.Commit], update: l.at[stagetrace.Update],
			apply: l.at[stagetrace.Apply], answer: l.at[stagetrace.Answer],
		}
		// The follower that counts is the one whose ack came back first.
		for id, f := range en.nodes {
			if id == en.leader {
				continue
			}
			// Its ack comes after it received and synced the entry; the
			// leader's clock (sent) has no say in which ack it is.
			recv := f.at[stagetrace.Recv]
			after := max(recv, f.at[stagetrace.Sync])
			ackSent := firstAck(acks[ackKey{id, k.shard, en.leader, stagetrace.AckSent}], en.index, after)
			if ackSent == 0 {
				continue
			}
			ackRecv := firstAck(acks[ackKey{en.leader, k.shard, id, stagetrace.AckRecv}], en.index, ackSent)
			if ackRecv == 0 || p.ackRecv != 0 && ackRecv >= p.ackRecv {
				continue
			}
			p.follower, p.sent, p.recv = id, l.sent[id], recv
			p.fSave, p.fWrite, p.fSync = f.at[stagetrace.Save], f.at[stagetrace.Write], f.at[stagetrace.Sync]
			p.ackSent, p.ackRecv = ackSent, ackRecv
		}
		if p.follower == 0 {
			out.incomplete++
			continue
		}
		out.paths = append(out.paths, p)
	}
	sort.Slice(out.paths, func(i, j int) bool { return out.paths[i].propose < out.paths[j].propose })
	return out
}

// firstAck is the time of the first ack in acks (sorted by time) at or
// after after that covers index, 0 if there is none.
func firstAck(acks []ack, index uint64, after int64) int64 {
	i := sort.Search(len(acks), func(i int) bool { return acks[i].t >= after })
	for ; i < len(acks); i++ {
		if acks[i].index >= index {
			return acks[i].t
		}
	}
	return 0
}
