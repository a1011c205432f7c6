package client

// Membership (protocol 1.3): an operator's requests to list, add, remove
// and reorder the cluster's members (M -). They go over the client's
// connections like every request (TLS, the secret, MOVED to the member
// that coordinates changes); the cluster checks and carries them out.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/codec"
)

// Roles of a member.
const (
	// RoleVoter is a member that votes, may lead and serves clients.
	RoleVoter = "voter"
	// RoleLearner is a member that receives the log but does not vote,
	// never leads and serves no client: a new member until the cluster
	// promotes it, once it has caught up.
	RoleLearner = "learner"
)

// MemberWindow is how long a membership request is retried while the
// cluster answers that no member coordinates changes right now (ERR
// unavailable, during an election) or names one that cannot be reached.
const MemberWindow = 5 * time.Second

// MemberAddrs are the addresses of a member, as its batond serves them.
type MemberAddrs struct {
	// Raft is the host:port of its Raft transport.
	Raft string
	// Client is the host:port of its client port.
	Client string
	// TLS is the host:port where it serves clients over TLS (batond
	// --tls-listen), or "" for none.
	TLS string
}

// Member is one member of the cluster, as ListMembers reports it.
type Member struct {
	// ID is the member's id, never given to another member.
	ID uint64
	// Role is RoleVoter or RoleLearner (or, from a newer server, another
	// word).
	Role string
	MemberAddrs
}

// ListMembers returns the cluster's members in priority order: the voters
// first, the preferred leader first of all, then the learners in the order
// they were added (M - LIST). Members is the lighter request for the
// addresses clients use.
func (cl *Client) ListMembers(ctx context.Context) ([]Member, error) {
	value, err := cl.member(ctx, "LIST", false)
	if err != nil {
		return nil, opErr("member list", "", err)
	}
	members, err := parseMembers(value)
	if err != nil {
		return nil, opErr("member list", "", err)
	}
	return members, nil
}

// AddMember adds a member with the addresses addrs, as a learner, and
// returns its id (M - ADD): the node is then started with
// `batond --id ID --join RAFT/CLIENT --data DIR`, catches up, and the
// cluster promotes it to voter by itself. A refusal matches ErrRefused.
//
// The request is sent once: when its connection is lost before the answer,
// the error matches ErrUnavailable and says that the member may or may not
// have been added (ListMembers tells).
func (cl *Client) AddMember(ctx context.Context, addrs MemberAddrs) (uint64, error) {
	arg, err := addrs.arg()
	if err != nil {
		return 0, argError("member add: %v", err)
	}
	value, err := cl.member(ctx, "ADD "+arg, true)
	if err != nil {
		return 0, opErr("member add", "", err)
	}
	id, err := parseID(value)
	if err != nil {
		return 0, opErr("member add", "", fmt.Errorf("bad answer M - OK %s: want the new member's id", value))
	}
	return id, nil
}

// RemoveMember removes the member with the given id from the cluster (M -
// REMOVE). The cluster refuses (ErrRefused) to remove its last voter, or
// a voter without which the voters left would have no live majority,
// unless force is set, which skips that second check only: use it for a
// member that is gone for good while too few others are live.
//
// The request is sent once, as AddMember's.
func (cl *Client) RemoveMember(ctx context.Context, id uint64, force bool) error {
	if id == 0 {
		return argError("member remove: id 0 is not a member's")
	}
	args := "REMOVE " + strconv.FormatUint(id, 10)
	if force {
		args += " FORCE"
	}
	_, err := cl.member(ctx, args, true)
	return opErr("member remove", "", err)
}

// SetMemberPriority sets the priority order of the voters (M - PRIORITY):
// ids names every voter once, the preferred leader first. The first live,
// caught-up voter then leads every shard. A list that is not every voter
// once is refused.
func (cl *Client) SetMemberPriority(ctx context.Context, ids []uint64) error {
	if len(ids) == 0 {
		return argError("member priority: no member id")
	}
	seen := make(map[uint64]bool, len(ids))
	parts := make([]string, len(ids))
	for i, id := range ids {
		if id == 0 || seen[id] {
			return argError("member priority: want every voter's id once, got %v", ids)
		}
		seen[id] = true
		parts[i] = strconv.FormatUint(id, 10)
	}
	_, err := cl.member(ctx, "PRIORITY "+strings.Join(parts, ","), false)
	return opErr("member priority", "", err)
}

// member sends "M - <args>" and returns the value of its OK. once: a
// change that must not be sent twice (see AddMember).
func (cl *Client) member(ctx context.Context, args string, once bool) (string, error) {
	if len(args)+len("M - ") > codec.MaxLine {
		return "", argError("member request longer than %d bytes", codec.MaxLine)
	}
	req := codec.Request{Op: codec.OpMember, Key: []byte(codec.HelloKey), Args: []byte(args)}
	ans, err := cl.exchange(ctx, &req, codec.HelloKey, policy{once: once, window: cl.opts.memberWindow})
	if err != nil {
		return "", err
	}
	return ans.value, nil
}

// arg is the addresses as ADD takes them: RAFT/CLIENT[/TLS].
func (a MemberAddrs) arg() (string, error) {
	for _, f := range []struct{ name, addr string }{{"Raft", a.Raft}, {"Client", a.Client}, {"TLS", a.TLS}} {
		if f.addr == "" && f.name == "TLS" {
			continue
		}
		if err := checkMemberAddr(f.addr); err != nil {
			return "", fmt.Errorf("%s address: %w", f.name, err)
		}
	}
	s := a.Raft + "/" + a.Client
	if a.TLS != "" {
		s += "/" + a.TLS
	}
	return s, nil
}

// checkMemberAddr validates one address of a member: host:port, with a
// host and a port from 1 to 65535, and nothing that would end its field
// on the wire.
func checkMemberAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(addr, "/, \t") || !codec.ValidKey([]byte(addr)) {
		return fmt.Errorf("%q: want host:port", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: bad port", addr)
	}
	return nil
}

// parseMembers reads LIST's value: members separated by spaces, each
// <id>/<role>/<raft>/<client>/<tls or ->.
func parseMembers(value string) ([]Member, error) {
	fields := strings.Fields(value)
	members := make([]Member, 0, len(fields))
	for _, f := range fields {
		p := strings.Split(f, "/")
		if len(p) != 5 {
			return nil, fmt.Errorf("bad member %q in the answer: want ID/ROLE/RAFT/CLIENT/TLS", f)
		}
		id, err := parseID(p[0])
		if err != nil || p[1] == "" || p[2] == "" || p[3] == "" || p[4] == "" {
			return nil, fmt.Errorf("bad member %q in the answer: want ID/ROLE/RAFT/CLIENT/TLS", f)
		}
		m := Member{ID: id, Role: p[1], MemberAddrs: MemberAddrs{Raft: p[2], Client: p[3]}}
		if p[4] != "-" {
			m.TLS = p[4]
		}
		members = append(members, m)
	}
	return members, nil
}

// parseID reads a member id: a decimal number, not 0.
func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, errors.New("bad member id")
	}
	return id, nil
}
