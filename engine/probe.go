package engine

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// A node started with an empty data dir under the id of a member of a
// running cluster would take its place with none of its log: the leader,
// which counts the entries that member acknowledged, would find them
// missing (dragonboat panics on it, "invalid commitTo index"), and worse,
// the node would vote again in terms it had voted in. So before a node
// bootstraps a new data dir it asks its peers what they know of its id
// (M - WHOIS), and refuses to start, saying what to do, if the cluster
// has a directory that lists the id or its removal. A peer that does not
// answer, or has no directory yet (the cluster's first start may be under
// way), lets it start: the first start of a cluster must not need the
// others up.

// probeTimeout bounds the question to one peer.
const probeTimeout = time.Second

// probePeers asks the other peers of a first start about this node's id,
// and returns why the node must not start, or nil.
func (n *Node) probePeers() error {
	for i, p := range n.cfg.Peers {
		if uint64(i+1) == n.cfg.ID {
			continue
		}
		switch n.whois(p.ClientAddr) {
		case whoisMember:
			return fmt.Errorf("data dir %s is empty, but member %d of the running cluster (asked %s) is this node: its data is lost, and it cannot come back under its id. "+
				"Replace it: baton member remove %d --addr %s; baton member add %s --addr %s; then batond --id <the new id> --join %s --data %s",
				n.cfg.DataDir, n.cfg.ID, p.ClientAddr, n.cfg.ID, p.ClientAddr, n.cfg.self(), p.ClientAddr, n.cfg.self(), n.cfg.DataDir)
		case whoisRemoved:
			return fmt.Errorf("member %d was removed from the running cluster (asked %s), and an id is never given again: add this node as a new member (baton member add %s --addr %s), then batond --id <the new id> --join %s --data %s",
				n.cfg.ID, p.ClientAddr, n.cfg.self(), p.ClientAddr, n.cfg.self(), n.cfg.DataDir)
		}
	}
	return nil
}

// whois asks the node at addr what it knows of this node's id; "" when it
// cannot tell (no answer, or a build without membership).
func (n *Node) whois(addr string) string {
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(probeTimeout))
	var req strings.Builder
	if n.cfg.AuthSecret != nil {
		fmt.Fprintf(&req, "H %s\n", n.cfg.AuthSecret)
	}
	fmt.Fprintf(&req, "M - %s %d\n", verbWhois, n.cfg.ID)
	if _, err := c.Write([]byte(req.String())); err != nil {
		return ""
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ""
		}
		if answer, ok := strings.CutPrefix(strings.TrimSpace(line), "M - OK "); ok {
			return answer
		}
		if strings.HasPrefix(line, "M ") || strings.HasPrefix(line, "?") {
			return ""
		}
	}
}
