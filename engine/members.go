package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Membership (protocol 1.3) is Raft state: the members, their addresses,
// roles and priority order are a directory that shard 1's table keeps
// (statemachine: Table.Directory, an opaque blob to it, JSON to us), and
// that every replica of shard 1 decodes as it applies it (directoryApplied).
// Before the cluster version allows it (statemachine.LevelMembership) and
// until the leader of shard 1 has written the first directory (seedDirectory,
// membership.go), a node's view is the one its data dir was bootstrapped
// with: the --peers of the cluster's first start, all voters, ids 1..n.

// Member roles.
const (
	roleVoter   = "voter"
	roleLearner = "learner"
)

// member is one member of the cluster.
type member struct {
	ID     uint64 `json:"id"`
	Raft   string `json:"raft"`
	Client string `json:"client"`
	TLS    string `json:"tls,omitempty"` // its TLS client address; "" when it has none
	Role   string `json:"role"`          // roleVoter or roleLearner
	// Ready says that a learner has caught up on every shard (it wrote so
	// itself): the cluster may promote it.
	Ready bool `json:"ready,omitempty"`
}

// change is a membership change under way. It is written into the
// directory before its first step is taken, so that whoever leads shard 1
// next finishes it if its coordinator dies (membership.go).
type change struct {
	Kind string `json:"kind"` // changeAdd, changeRemove or changePromote
	ID   uint64 `json:"id"`   // the member added, removed or promoted
}

// Kinds of change.
const (
	changeAdd     = "add"
	changeRemove  = "remove"
	changePromote = "promote"
)

// directory is the cluster's membership.
type directory struct {
	// Members lists the voters in priority order, then the learners in the
	// order they were added.
	Members []member `json:"members"`
	// NextID is the id the next member added gets: ids are never reused
	// (dragonboat refuses a removed replica id for good).
	NextID uint64 `json:"next_id"`
	// Removed lists the ids of the members removed, so that a node started
	// under one can be told why it will never be let in.
	Removed []uint64 `json:"removed,omitempty"`
	// Shards is the cluster's number of shards, which a joining node
	// learns from here.
	Shards int `json:"shards"`
	// Change is the change under way, nil when none is.
	Change *change `json:"change,omitempty"`

	// Not encoded:
	version uint64 // the table's directory version it was read at; 0 for a bootstrap view
	voters  int    // how many Members are voters
}

// bootstrapDirectory is the view of a node whose shard 1 holds no
// directory yet: its data dir's --peers, all voters.
func bootstrapDirectory(peers []Peer, tlsPeers []string, shards int) *directory {
	d := &directory{NextID: uint64(len(peers)) + 1, Shards: shards}
	for i, p := range peers {
		m := member{ID: uint64(i + 1), Raft: p.RaftAddr, Client: p.ClientAddr, Role: roleVoter}
		if i < len(tlsPeers) {
			m.TLS = tlsPeers[i]
		}
		d.Members = append(d.Members, m)
	}
	d.count()
	return d
}

// decodeDirectory reads a directory blob of version v.
func decodeDirectory(blob []byte, v uint64) (*directory, error) {
	var d directory
	if err := json.Unmarshal(blob, &d); err != nil {
		return nil, fmt.Errorf("membership directory version %d: %w", v, err)
	}
	d.version = v
	d.count()
	return &d, nil
}

// encode is the blob of d.
func (d *directory) encode() []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic("engine: encode directory: " + err.Error()) // plain data: not reached
	}
	return b
}

// clone is a deep copy of d to change.
func (d *directory) clone() *directory {
	c := *d
	c.Members = slices.Clone(d.Members)
	c.Removed = slices.Clone(d.Removed)
	if d.Change != nil {
		ch := *d.Change
		c.Change = &ch
	}
	return &c
}

// count sets voters and keeps the voters before the learners.
func (d *directory) count() {
	slices.SortStableFunc(d.Members, func(a, b member) int {
		return boolInt(a.Role != roleVoter) - boolInt(b.Role != roleVoter)
	})
	d.voters = 0
	for _, m := range d.Members {
		if m.Role == roleVoter {
			d.voters++
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// member finds id.
func (d *directory) member(id uint64) (member, bool) {
	for _, m := range d.Members {
		if m.ID == id {
			return m, true
		}
	}
	return member{}, false
}

// isVoter reports whether id is a voter.
// catchingUp reports whether a learner has not said yet that it caught
// up (Ready): a node that joins, loading what the leader sent it.
func (d *directory) catchingUp() bool {
	for _, m := range d.Members {
		if m.Role == roleLearner && !m.Ready {
			return true
		}
	}
	return false
}

func (d *directory) isVoter(id uint64) bool {
	m, ok := d.member(id)
	return ok && m.Role == roleVoter
}

// rank is id's place in the priority order: 0 for the first voter, the
// learners after the voters, and every id that is not a member last.
func (d *directory) rank(id uint64) int {
	for i, m := range d.Members {
		if m.ID == id {
			return i
		}
	}
	return math.MaxInt
}

// voterIDs lists the voters' ids in priority order.
func (d *directory) voterIDs() []uint64 {
	ids := make([]uint64, 0, d.voters)
	for _, m := range d.Members[:d.voters] {
		ids = append(ids, m.ID)
	}
	return ids
}

// removed reports whether id belonged to a member that was removed.
func (d *directory) removed(id uint64) bool { return slices.Contains(d.Removed, id) }

// clientAddrs is the answer to C -: the voters' client addresses in
// priority order, their TLS addresses for a client on TLS (the plain one
// of a voter that has none).
func (d *directory) clientAddrs(tls bool) string {
	addrs := make([]string, 0, d.voters)
	for _, m := range d.Members[:d.voters] {
		a := m.Client
		if tls && m.TLS != "" {
			a = m.TLS
		}
		addrs = append(addrs, a)
	}
	return strings.Join(addrs, ",")
}

// list is the answer to M - LIST: every member as
// id/role/raft/client/tls ("-" for no TLS address), space-separated, in
// priority order (docs/protocol.md).
func (d *directory) list() string {
	var b strings.Builder
	for i, m := range d.Members {
		if i > 0 {
			b.WriteByte(' ')
		}
		tls := m.TLS
		if tls == "" {
			tls = "-"
		}
		b.WriteString(strconv.FormatUint(m.ID, 10))
		for _, f := range []string{m.Role, m.Raft, m.Client, tls} {
			b.WriteByte('/')
			b.WriteString(f)
		}
	}
	return b.String()
}

// usesAddr names the member that has addr as one of its addresses, or 0.
func (d *directory) usesAddr(addr string) uint64 {
	for _, m := range d.Members {
		if m.Raft == addr || m.Client == addr || m.TLS != "" && m.TLS == addr {
			return m.ID
		}
	}
	return 0
}

// whois is what d says of member id (WHOIS): whoisMember, whoisRemoved,
// whoisFree, or whoisBootstrap for a view that is not the cluster's
// directory yet.
func (d *directory) whois(id uint64) string {
	switch _, ok := d.member(id); {
	case d.version == 0:
		return whoisBootstrap
	case ok:
		return whoisMember
	case d.removed(id):
		return whoisRemoved
	}
	return whoisFree
}
