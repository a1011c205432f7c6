package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/baton-dev/baton/codec"
	sm "github.com/baton-dev/baton/statemachine"
)

// Membership changes (protocol 1.3). The leader of shard 1 that serves is
// the coordinator: it takes the operator's M requests, and carries out one
// change at a time in three steps:
//
//  1. it writes the change into the directory (a compare-and-set on the
//     directory version: statemachine's directory write), with the member
//     added, or marked to go;
//  2. it makes the change in every shard's Raft membership (dragonboat's
//     config changes, each based on the shard's last one, so that two
//     racing coordinators cannot both apply theirs), checking each shard
//     first so that a step already taken is not taken again;
//  3. it writes the directory without the change.
//
// Whoever leads shard 1 next finds a change that step 3 did not clear and
// finishes it (runMembership): a change is never left half done across
// shards, and is answered only once step 3 committed. A learner catches up
// by itself and says so in the directory (Ready); the coordinator then
// promotes it, which is a change too.

const (
	// membershipInterval is how often a node looks at the membership: a
	// change to finish, a learner to promote, its own catch-up to report.
	membershipInterval = 500 * time.Millisecond
	// changeTimeout bounds one membership change, every shard included.
	changeTimeout = 60 * time.Second
	// liveWithin is how recently the leader must have heard from a voter
	// for it to count as live in the check of a remove (PROTOCOL.md).
	liveWithin = 5 * time.Second
	// removedExit is how long a node that is being removed keeps running
	// after it learned so: time for the change to finish, then it exits
	// (PROTOCOL.md: within 30 s).
	removedExit = 20 * time.Second
	// changeLockWait is how long an operator's change waits for the
	// coordinator to finish what it is doing (a periodic check, the end of
	// a change it found) before it is refused as a change under way.
	changeLockWait = time.Second
	// changeRetryPause spaces two tries of one step of a change in a shard.
	changeRetryPause = 50 * time.Millisecond
	// cutOffAsk is how long this node must have known no leader of shard
	// 1 before it asks the other members whether it was removed
	// (askFate), and how often it asks again while that lasts.
	cutOffAsk = 5 * time.Second
)

// Verbs of M.
const (
	verbList     = "LIST"
	verbAdd      = "ADD"
	verbRemove   = "REMOVE"
	verbPriority = "PRIORITY"
	// verbWhois asks what the cluster knows of a member id (whois): what a
	// node started with an empty data dir asks its peers (probe.go).
	verbWhois = "WHOIS"
)

// Answers to WHOIS.
const (
	whoisMember    = "member"    // a member of the cluster's directory
	whoisRemoved   = "removed"   // a member that was removed
	whoisFree      = "free"      // never a member
	whoisBootstrap = "bootstrap" // no directory yet: the cluster's first start may be under way
)

// errConflict is a directory write that did not take: the directory
// changed since it was read.
var errConflict = errors.New("the membership changed meanwhile: retry")

// ErrRemoved is what Node.Failed delivers when this node was removed from
// the cluster (errors.Is).
var ErrRemoved = errors.New("removed from the cluster")

// view is the node's membership view: the bootstrap one until start sets
// it (a Node built by a unit test may never be started).
func (n *Node) view() *directory {
	if d := n.members.Load(); d != nil {
		return d
	}
	return n.bootstrapView()
}

// bootstrapView is the view before shard 1 holds a directory: the data
// dir's --peers, or this node alone, a learner, for a node that joins.
func (n *Node) bootstrapView() *directory {
	if n.cfg.Join != nil {
		d := &directory{Shards: n.cfg.Shards, Members: []member{{ID: n.cfg.ID, Raft: n.cfg.Join.RaftAddr, Client: n.cfg.Join.ClientAddr, Role: roleLearner}}}
		d.count()
		return d
	}
	return bootstrapDirectory(n.cfg.Peers, n.cfg.TLSPeers, n.cfg.Shards)
}

// replicaStart is how this node starts its replica of shard: with the
// initial members at a cluster's first start, to join for a node that
// joins, and as a learner as long as startsAsLearner says.
func (n *Node) replicaStart(shard uint64) (members map[uint64]dragonboat.Target, join, learner bool) {
	if n.nh.HasNodeInfo(shard, n.cfg.ID) {
		return nil, false, n.startsAsLearner(shard)
	}
	if n.cfg.Join != nil {
		return nil, true, true
	}
	members = make(map[uint64]dragonboat.Target, len(n.cfg.Peers))
	for i, p := range n.cfg.Peers {
		members[uint64(i+1)] = p.RaftAddr
	}
	return members, false, false
}

// startsAsLearner reports whether this node's replica of shard, which it
// has started before, must start as a learner. A node that joined did so
// as a learner, and dragonboat replays at start the membership changes
// its log holds after its last snapshot: the add of this learner panics
// on a replica started as a voter ("is not a nonVoting"), and the
// promotion after it turns a replica started as a learner into a voter.
// So the replica starts as a learner unless its last snapshot lists it as
// a voter (then no add is replayed, and a replica started as a learner
// would stay one: lni/dragonboat#373). Without baton's log store (no
// n.logdb) the data dir's record of the promotion decides, which a crash
// between the promotion and the record can leave behind.
func (n *Node) startsAsLearner(shard uint64) bool {
	if n.cfg.Join == nil {
		return false
	}
	if n.logdb == nil {
		return !n.cfg.joinedVoter
	}
	ss, err := n.logdb.GetSnapshot(shard, n.cfg.ID)
	if err != nil {
		return true
	}
	_, voter := ss.Membership.Addresses[n.cfg.ID]
	return !voter
}

// loadDirectory takes shard 1's applied directory as the view; it runs
// on shard 1's apply path (Reset, and each directory write applied), with
// its mu held, and must not block.
func (n *Node) loadDirectory(t sm.Table) {
	v, blob := t.Directory()
	if v == 0 || v == n.view().version {
		return
	}
	d, err := decodeDirectory(blob, v)
	if err != nil {
		n.log.Error("cannot read the membership", "err", err)
		return
	}
	n.members.Store(d)
	select {
	case n.dirChanged <- struct{}{}:
	default:
	}
}

// heard records that a Raft message from member id arrived (raftnet).
// A node that bootstrapped an empty data dir in this run and hears from a
// member its --peers do not list was started under the id of a member of
// a cluster that has changed since (the peers it asked first were gone,
// probe.go): it stops before it takes part.
func (n *Node) heard(id uint64) {
	if n.freshStart {
		if d := n.view(); d.version == 0 {
			if _, ok := d.member(id); !ok {
				n.fail(fmt.Errorf("data dir %s was empty, and member %d of a running cluster that --peers does not list has reached this node: "+
					"the cluster has changed since --peers was written, and this node cannot be member %d again with an empty data dir. "+
					"If member %d still belongs to the cluster, remove it (baton member remove %d) and add this node as a new member (baton member add %s), then start it with batond --id <the new id> --join %s --data %s",
					n.cfg.DataDir, id, n.cfg.ID, n.cfg.ID, n.cfg.ID, n.cfg.self(), n.cfg.self(), n.cfg.DataDir))
			}
		}
	}
	if t, ok := n.lastHeard.Load(id); ok {
		t.(*atomic.Int64).Store(monoNow())
		return
	}
	var t atomic.Int64
	t.Store(monoNow())
	n.lastHeard.LoadOrStore(id, &t)
}

// live reports whether this node heard from member id within liveWithin;
// itself counts as live. Without baton's transport (which tells the node
// what it hears) a member is live if its client port takes connections.
func (n *Node) live(ctx context.Context, id uint64) bool {
	if id == n.cfg.ID {
		return true
	}
	if n.cfg.RaftTransport != RaftTransportBaton {
		return n.peerAlive(ctx, id)
	}
	t, ok := n.lastHeard.Load(id)
	return ok && monoNow()-t.(*atomic.Int64).Load() < int64(liveWithin)
}

// ---- Requests ----

// serveCluster answers C -: the voters' client addresses in priority
// order, their TLS ones on a TLS connection.
func (n *Node) serveCluster(cs *connState) {
	_, onTLS := cs.t.(*tlsConn)
	cs.send(&codec.Response{Op: codec.OpCluster, Key: dashKey, Status: codec.StatusOK, Value: []byte(n.view().clientAddrs(onTLS))}, nil)
}

var dashKey = []byte(codec.HelloKey)

// memberAnswer is an answer to M.
func memberAnswer(status codec.Status, code, text string) *codec.Response {
	r := &codec.Response{Op: codec.OpMember, Key: dashKey, Status: status}
	switch status {
	case codec.StatusOK:
		r.Value = []byte(text)
	case codec.StatusMoved:
		r.Addr = []byte(text)
	default:
		r.Code, r.Text = []byte(code), []byte(text)
	}
	return r
}

// serveMember answers M, off the event loop (a change takes Raft rounds
// on every shard), and after the connection's M before it: the answers to
// one connection's requests of one (op, key) keep their order, and a LIST
// after a change shows it.
func (n *Node) serveMember(cs *connState, req *codec.Request) {
	args := strings.Fields(string(req.Args))
	prev, done := cs.memberDone, make(chan struct{})
	cs.memberDone = done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		cs.send(n.member(cs, args), nil)
	}()
}

// member is the answer to M args.
func (n *Node) member(cs *connState, args []string) *codec.Response {
	switch verb := strings.ToUpper(args[0]); verb {
	case verbList:
		if len(args) != 1 {
			return memberAnswer(codec.StatusErr, codec.CodeBadRequest, "LIST takes no argument")
		}
		return memberAnswer(codec.StatusOK, "", n.view().list())
	case verbAdd, verbRemove, verbPriority:
		return n.memberChange(cs, verb, args[1:])
	case verbWhois:
		id, err := strconv.ParseUint(strings.Join(args[1:], " "), 10, 64)
		if err != nil || id == 0 {
			return memberAnswer(codec.StatusErr, codec.CodeBadRequest, "WHOIS takes a member id")
		}
		return memberAnswer(codec.StatusOK, "", n.view().whois(id))
	}
	return memberAnswer(codec.StatusErr, codec.CodeBadRequest, fmt.Sprintf("unknown member verb %q: LIST, ADD, REMOVE or PRIORITY", args[0]))
}

// memberChange carries out an operator's change as the coordinator, or
// sends the client to it.
func (n *Node) memberChange(cs *connState, verb string, args []string) *codec.Response {
	refuse := func(format string, a ...any) *codec.Response {
		return memberAnswer(codec.StatusErr, codec.CodeRefused, fmt.Sprintf(format, a...))
	}
	s1 := n.shards[0]
	s1.mu.Lock()
	leader, serving := s1.leaderID, s1.serving && !s1.handingOff
	s1.mu.Unlock()
	switch {
	case leader != n.cfg.ID && leader != 0:
		if addr := n.movedAddr(cs, leader); addr != "" {
			return memberAnswer(codec.StatusMoved, "", addr)
		}
		fallthrough
	case !serving:
		return memberAnswer(codec.StatusErr, codec.CodeUnavailable, "no member serves shard 1 right now: retry")
	}
	if v := s1.stats.clusterVersion.Load(); v < sm.LevelMembership {
		return refuse("the cluster version is %d and membership changes need %d: every member must run a build of level %d or later first (baton status shows the cluster version)",
			v, sm.LevelMembership, sm.LevelMembership)
	}
	if d := n.view(); d.Change != nil && !d.Change.is(d, verb, args) {
		c := d.Change
		return refuse("a membership change is under way (%s of member %d): retry once it is done", c.Kind, c.ID)
	}
	if !n.lockChange(changeLockWait) {
		select {
		case <-n.stopC:
			return memberAnswer(codec.StatusErr, codec.CodeUnavailable, "this member is stopping: retry on another")
		default:
		}
		return refuse("a membership change is under way: retry once it is done")
	}
	defer n.unlockChange()
	ctx, cancel := n.changeContext()
	defer cancel()
	d := n.view()
	switch {
	case d.version == 0:
		return memberAnswer(codec.StatusErr, codec.CodeUnavailable, "the membership is being written for the first time: retry")
	case d.Change != nil && d.Change.is(d, verb, args):
		// The change under way is the one asked for: a retry, after its
		// coordinator was lost or handed over. Finish it and answer.
		return n.answerChange(ctx, cs, verb, d.Change.ID)
	case d.Change != nil:
		return refuse("a membership change is under way (%s of member %d): retry once it is done", d.Change.Kind, d.Change.ID)
	}
	var nd *directory
	var err error
	switch verb {
	case verbAdd:
		nd, err = addMember(d, args)
	case verbRemove:
		nd, err = n.removeMember(ctx, d, args)
	case verbPriority:
		nd, err = reorder(d, args)
	}
	var bad badArgs
	switch {
	case errors.As(err, &bad):
		return memberAnswer(codec.StatusErr, codec.CodeBadRequest, bad.Error())
	case err != nil:
		return refuse("%s", err.Error())
	case nd == nil:
		return memberAnswer(codec.StatusOK, "", "")
	}
	if err := n.writeDirectory(ctx, d, nd); err != nil {
		return memberAnswer(codec.StatusErr, codec.CodeUnavailable, err.Error())
	}
	var id uint64
	if nd.Change != nil {
		id = nd.Change.ID
	}
	return n.answerChange(ctx, cs, verb, id)
}

// answerChange finishes the change under way, asked for by verb, and
// answers it. A coordinator that is the member removed does not finish
// its own removal: it hands shard 1 over (ownFate, as it learns of the
// change) and sends the client to the next coordinator, which finishes it
// when the client asks again.
func (n *Node) answerChange(ctx context.Context, cs *connState, verb string, id uint64) *codec.Response {
	if verb == verbRemove && id == n.cfg.ID {
		for ctx.Err() == nil {
			if leader := n.shards[0].stats.leaderID.Load(); leader != 0 && leader != n.cfg.ID {
				if addr := n.movedAddr(cs, leader); addr != "" {
					return memberAnswer(codec.StatusMoved, "", addr)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return memberAnswer(codec.StatusErr, codec.CodeUnavailable, "this member is being removed and no other has taken shard 1 over yet: retry")
	}
	if err := n.finishChange(ctx); err != nil {
		return memberAnswer(codec.StatusErr, codec.CodeUnavailable, "the change is written and the cluster will finish it, but not yet: "+err.Error())
	}
	n.log.Info("membership changed", "verb", verb, "id", id, "members", n.view().list())
	if verb == verbAdd {
		return memberAnswer(codec.StatusOK, "", strconv.FormatUint(id, 10))
	}
	return memberAnswer(codec.StatusOK, "", "")
}

// is reports whether c is the change that M verb args asks for: the
// removal of the same member, or the add of a member at the same
// addresses.
func (c *change) is(d *directory, verb string, args []string) bool {
	switch {
	case verb == verbRemove && c.Kind == changeRemove && len(args) >= 1:
		return args[0] == strconv.FormatUint(c.ID, 10)
	case verb == verbAdd && c.Kind == changeAdd && len(args) == 1:
		m, _ := d.member(c.ID)
		addrs := m.Raft + "/" + m.Client
		if m.TLS != "" {
			addrs += "/" + m.TLS
		}
		return args[0] == addrs
	}
	return false
}

// lockChange takes the coordinator's one slot for a change, waiting at
// most wait for it. An operator's change waits a little, so that it is
// not refused for the moment the coordinator spends on a periodic check
// or on clearing a change it just finished; the coordinator's own loop
// never waits (it comes back every membershipInterval).
func (n *Node) lockChange(wait time.Duration) bool {
	select {
	case n.changing <- struct{}{}:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case n.changing <- struct{}{}:
		return true
	case <-t.C:
	case <-n.stopC:
	}
	return false
}

// unlockChange gives back the slot that lockChange took.
func (n *Node) unlockChange() { <-n.changing }

// changeContext bounds one membership change by changeTimeout and the
// node's stop.
func (n *Node) changeContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), changeTimeout)
	go func() {
		select {
		case <-n.stopC:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// badArgs is an M whose arguments are malformed (ERR badrequest), as
// against one the cluster refuses (ERR refused).
type badArgs string

func (b badArgs) Error() string { return string(b) }

// addMember is d with a learner added at RAFT/CLIENT[/TLS], and the add
// under way.
func addMember(d *directory, args []string) (*directory, error) {
	if len(args) != 1 {
		return nil, badArgs("ADD takes RAFT_ADDR/CLIENT_ADDR[/TLS_ADDR]")
	}
	addrs := strings.Split(args[0], "/")
	if len(addrs) < 2 || len(addrs) > 3 {
		return nil, badArgs(fmt.Sprintf("ADD %s: want RAFT_ADDR/CLIENT_ADDR[/TLS_ADDR]", args[0]))
	}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, badArgs(fmt.Sprintf("ADD %s: bad address %q", args[0], a))
		}
		if id := d.usesAddr(a); id != 0 {
			return nil, fmt.Errorf("address %s is member %d's", a, id)
		}
	}
	if addrs[0] == addrs[1] || len(addrs) == 3 && (addrs[2] == addrs[0] || addrs[2] == addrs[1]) {
		return nil, badArgs(fmt.Sprintf("ADD %s: an address appears twice", args[0]))
	}
	nd := d.clone()
	m := member{ID: nd.NextID, Raft: addrs[0], Client: addrs[1], Role: roleLearner}
	if len(addrs) == 3 {
		m.TLS = addrs[2]
	}
	nd.NextID++
	nd.Members = append(nd.Members, m)
	nd.Change = &change{Kind: changeAdd, ID: m.ID}
	nd.count()
	return nd, nil
}

// removeMember is d with the removal of member ID under way, unless it
// is the last voter or, without FORCE, the voters left would not have a
// live majority; nil if ID was removed already.
func (n *Node) removeMember(ctx context.Context, d *directory, args []string) (*directory, error) {
	force := len(args) == 2 && strings.EqualFold(args[1], "FORCE")
	if len(args) != 1 && !force {
		return nil, badArgs("REMOVE takes ID [FORCE]")
	}
	id, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || id == 0 {
		return nil, badArgs(fmt.Sprintf("REMOVE %s: not a member id", args[0]))
	}
	m, ok := d.member(id)
	switch {
	case !ok && d.removed(id):
		// Done already: a REMOVE sent again after an answer that did not
		// say so (ERR unavailable, a lost connection) is answered OK.
		return nil, nil
	case !ok:
		return nil, fmt.Errorf("there is no member %d (baton member list shows them)", id)
	case m.Role == roleVoter && d.voters == 1:
		return nil, fmt.Errorf("member %d is the last voter", id)
	}
	if m.Role == roleVoter && !force {
		var left, live []uint64
		for _, v := range d.voterIDs() {
			if v == id {
				continue
			}
			left = append(left, v)
			if n.live(ctx, v) {
				live = append(live, v)
			}
		}
		if len(live) < len(left)/2+1 {
			return nil, fmt.Errorf("the %d voters left would not have a live majority (live: %v, the leader heard from none of the others in %s); --force removes it all the same",
				len(left), live, liveWithin)
		}
	}
	nd := d.clone()
	nd.Change = &change{Kind: changeRemove, ID: id}
	return nd, nil
}

// reorder is d with the voters in the order of ID,ID,... (every voter
// once).
func reorder(d *directory, args []string) (*directory, error) {
	if len(args) != 1 {
		return nil, badArgs("PRIORITY takes ID,ID,... (every voter once)")
	}
	nd := d.clone()
	var order []member
	for _, f := range strings.Split(args[0], ",") {
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil || id == 0 {
			return nil, badArgs(fmt.Sprintf("PRIORITY %s: %q is not a member id", args[0], f))
		}
		m, ok := d.member(id)
		switch {
		case !ok:
			return nil, fmt.Errorf("there is no member %d", id)
		case m.Role != roleVoter:
			return nil, fmt.Errorf("member %d is a learner: the priority orders the voters", id)
		case slices.ContainsFunc(order, func(o member) bool { return o.ID == id }):
			return nil, badArgs(fmt.Sprintf("PRIORITY %s: member %d appears twice", args[0], id))
		}
		order = append(order, m)
	}
	if len(order) != d.voters {
		return nil, fmt.Errorf("PRIORITY names %d voters and the cluster has %d: name every voter once (%v)", len(order), d.voters, d.voterIDs())
	}
	nd.Members = append(order, nd.Members[d.voters:]...)
	nd.count()
	return nd, nil
}

// writeDirectory replaces the directory base (the view it was computed
// from) with nd in shard 1's table, and returns once that applied here;
// errConflict if the directory had changed meanwhile.
func (n *Node) writeDirectory(ctx context.Context, base, nd *directory) error {
	blob := nd.encode()
	if len(blob) > sm.MaxDirectory {
		return fmt.Errorf("the membership would take %d bytes, more than %d", len(blob), sm.MaxDirectory)
	}
	timeout := requestTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	rs, err := n.nh.Propose(n.sessions[0], sm.SealDirectory(n.cfg.ID, base.version, blob), timeout)
	if err != nil {
		return fmt.Errorf("propose the membership: %w", err)
	}
	if ok, _ := n.completed(rs); !ok {
		return errors.New("the membership write did not commit in time: retry")
	}
	if v := n.view(); v.version != base.version+1 || string(v.encode()) != string(blob) {
		return errConflict
	}
	return nil
}

// finishChange carries out the change of the view in every shard, then
// clears it from the directory. Each step looks first, so that a change
// that a coordinator before this one had begun is finished, not done
// twice.
func (n *Node) finishChange(ctx context.Context) error {
	d := n.view()
	c := d.Change
	if c == nil {
		return nil
	}
	m, _ := d.member(c.ID)
	for i, s := range n.shards {
		if i > 0 {
			n.failpoint(failBetweenShards)
		}
		if err := n.changeShard(ctx, s.id, c, m); err != nil {
			return fmt.Errorf("shard %d: %w", s.id, err)
		}
	}
	return n.clearChange(ctx, d)
}

// clearChange is the last step of d's change: the directory written
// without it, the member removed or promoted. A learner that reports
// itself caught up (reportCaughtUp) may write the directory meanwhile;
// while the change is still the one under way, the step is taken again on
// that newer directory, so that the report neither fails the change nor
// is lost.
func (n *Node) clearChange(ctx context.Context, d *directory) error {
	c := *d.Change
	for {
		nd := d.clone()
		nd.Change = nil
		switch c.Kind {
		case changeRemove:
			nd.Members = slices.DeleteFunc(nd.Members, func(o member) bool { return o.ID == c.ID })
			nd.Removed = append(nd.Removed, c.ID)
		case changePromote:
			i := slices.IndexFunc(nd.Members, func(o member) bool { return o.ID == c.ID })
			m := nd.Members[i]
			m.Role, m.Ready = roleVoter, false
			// Last in priority among the voters (count keeps the order).
			nd.Members = append(slices.Delete(nd.Members, i, i+1), m)
		}
		nd.count()
		err := n.writeDirectory(ctx, d, nd)
		if !errors.Is(err, errConflict) || ctx.Err() != nil {
			return err
		}
		if d = n.view(); d.Change == nil || *d.Change != c {
			return err
		}
	}
}

// changeShard makes change c, of member m, in shard's Raft membership,
// unless it is made already.
func (n *Node) changeShard(ctx context.Context, shard uint64, c *change, m member) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		mem, err := n.nh.SyncGetShardMembership(rctx, shard)
		cancel()
		if err != nil {
			// It may fail at once (a busy or closing NodeHost): not a spin.
			time.Sleep(changeRetryPause)
			continue
		}
		_, voter := mem.Nodes[c.ID]
		_, learner := mem.NonVotings[c.ID]
		var rs *dragonboat.RequestState
		switch c.Kind {
		case changeAdd:
			if voter || learner {
				return nil
			}
			rs, err = n.nh.RequestAddNonVoting(shard, c.ID, m.Raft, mem.ConfigChangeID, requestTimeout)
		case changePromote:
			if voter {
				return nil
			}
			rs, err = n.nh.RequestAddReplica(shard, c.ID, m.Raft, mem.ConfigChangeID, requestTimeout)
		case changeRemove:
			if !voter && !learner {
				return nil
			}
			if n.shardLedBy(shard, c.ID) && n.live(ctx, c.ID) {
				// It hands its shards over as it learns of the change
				// (ownFate); a leader removing itself would leave the
				// shard without one for an election.
				time.Sleep(changeRetryPause)
				continue
			}
			rs, err = n.nh.RequestDeleteReplica(shard, c.ID, mem.ConfigChangeID, requestTimeout)
		}
		if err != nil {
			time.Sleep(changeRetryPause)
			continue
		}
		if _, stopped := n.completed(rs); stopped {
			return errors.New("stopping")
		}
	}
}

// shardLedBy reports whether this node sees member id lead shard.
func (n *Node) shardLedBy(shard, id uint64) bool {
	s := n.shards[shard-1]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaderID == id
}

// ---- The membership loop ----

// runMembership acts on the membership every membershipInterval and
// whenever the view changes: on this node's own fate (a promotion to
// record, a removal), and, as the coordinator, on the cluster's (the first
// directory, a change to finish, a learner to promote).
func (n *Node) runMembership() {
	t := time.NewTicker(membershipInterval)
	defer t.Stop()
	var leaving time.Time // when this node learned that it is being removed
	var cutOff cutOffWatch
	for {
		select {
		case <-n.stopC:
			return
		case <-t.C:
		case <-n.dirChanged:
		}
		d := n.view()
		if n.ownFate(d, &leaving) {
			return
		}
		if cutOff.due(n.shards[0].stats.leaderID.Load() == 0, time.Now()) && n.askFate(d) {
			return
		}
		if n.coordinating() {
			n.coordinate(d)
		}
		if m, ok := d.member(n.cfg.ID); ok && m.Role == roleLearner && !m.Ready && d.version > 0 {
			n.reportCaughtUp(d)
		}
	}
}

// ownFate acts on what the view says of this node; true when the node
// is done (removed).
func (n *Node) ownFate(d *directory, leaving *time.Time) bool {
	me := n.cfg.ID
	if n.cfg.Join != nil && !n.cfg.joinedVoter && d.isVoter(me) {
		if err := n.dir.update(func(s *settings) { s.Voter = true }); err != nil {
			n.log.Error("cannot record this node's promotion in its data dir", "err", err)
		} else {
			n.cfg.joinedVoter = true
			n.log.Info("promoted to voter", "id", me)
		}
	}
	switch {
	case d.removed(me):
		n.leaving.Store(true)
		n.fail(fmt.Errorf("%w: this node was member %d, which was removed; its data dir cannot serve again (to bring the machine back: baton member add, then batond --join with an empty data dir)", ErrRemoved, me))
		return true
	case d.Change != nil && d.Change.Kind == changeRemove && d.Change.ID == me:
		if leaving.IsZero() {
			*leaving = time.Now()
			n.leaving.Store(true)
			n.log.Warn("this node is being removed from the cluster: handing its shards over", "id", me)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), removedExit/2)
				defer cancel()
				n.transferLeadership(ctx)
			}()
		}
		if time.Since(*leaving) > removedExit {
			n.fail(fmt.Errorf("%w: this node was member %d, whose removal was under way when it last heard of the cluster", ErrRemoved, me))
			return true
		}
	}
	return false
}

// A node can be removed without ever applying the directory write that
// says so: down or cut off while the change was made, it comes back to
// shards whose leaders no longer send it anything. It then knows no leader
// of shard 1 for good, so after cutOffAsk of that it asks the members it
// knows (M - WHOIS, as a fresh start does: probe.go) and leaves when one
// of them says it was removed. A node cut off by a partition asks too,
// gets no answer or "member", and stays.

// cutOffWatch says when a node that knows no leader of shard 1 asks about
// its fate: once it has known none for cutOffAsk, then every cutOffAsk.
type cutOffWatch struct {
	since, asked time.Time // when it last knew no leader; when it last asked
}

// due records whether the node knows no leader at now, and reports
// whether it should ask now.
func (w *cutOffWatch) due(leaderless bool, now time.Time) bool {
	if !leaderless {
		w.since = time.Time{}
		return false
	}
	if w.since.IsZero() {
		w.since = now
	}
	if now.Sub(w.since) < cutOffAsk || now.Sub(w.asked) < cutOffAsk {
		return false
	}
	w.asked = now
	return true
}

// askFate asks the other members of d, and the data dir's peers, what
// they know of this node, and fails the node (true) when one says it was
// removed.
func (n *Node) askFate(d *directory) bool {
	asked := map[string]bool{}
	for _, addr := range n.fateAddrs(d) {
		if asked[addr] {
			continue
		}
		asked[addr] = true
		if n.whois(addr) == whoisRemoved {
			n.leaving.Store(true)
			n.fail(fmt.Errorf("%w: this node was member %d, and %s says it was removed while this node was cut off; its data dir cannot serve again (to bring the machine back: baton member add, then batond --join with an empty data dir)", ErrRemoved, n.cfg.ID, addr))
			return true
		}
	}
	return false
}

// fateAddrs is where askFate asks: the client addresses of d's other
// members, then those of the data dir's peers.
func (n *Node) fateAddrs(d *directory) []string {
	var addrs []string
	for _, m := range d.Members {
		if m.ID != n.cfg.ID {
			addrs = append(addrs, m.Client)
		}
	}
	for i, p := range n.cfg.Peers {
		if uint64(i+1) != n.cfg.ID {
			addrs = append(addrs, p.ClientAddr)
		}
	}
	return addrs
}

// coordinating reports whether this node leads shard 1 and serves it.
func (n *Node) coordinating() bool {
	s := n.shards[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving && !s.handingOff && s.leaderID == n.cfg.ID && !n.draining.Load()
}

// coordinate writes the first directory once the cluster version allows
// it, finishes a change that its coordinator left, and promotes a learner
// that has caught up.
func (n *Node) coordinate(d *directory) {
	if n.shards[0].stats.clusterVersion.Load() < sm.LevelMembership || !n.lockChange(0) {
		return
	}
	defer n.unlockChange()
	ctx, cancel := n.changeContext()
	defer cancel()
	switch {
	case d.version == 0:
		seed := n.bootstrapView()
		if err := n.writeDirectory(ctx, d, seed); err == nil {
			n.log.Info("membership written", "members", seed.list())
		}
	case d.Change != nil:
		n.log.Info("finishing a membership change", "kind", d.Change.Kind, "id", d.Change.ID)
		if err := n.finishChange(ctx); err != nil {
			n.log.Warn("membership change not finished yet", "kind", d.Change.Kind, "id", d.Change.ID, "err", err)
		}
	default:
		i := slices.IndexFunc(d.Members, func(m member) bool { return m.Role == roleLearner && m.Ready })
		if i < 0 {
			return
		}
		nd := d.clone()
		nd.Change = &change{Kind: changePromote, ID: d.Members[i].ID}
		if n.writeDirectory(ctx, d, nd) != nil {
			return
		}
		if err := n.finishChange(ctx); err != nil {
			n.log.Warn("promotion not finished yet", "id", nd.Change.ID, "err", err)
			return
		}
		n.log.Info("promoted a learner to voter", "id", nd.Change.ID, "members", n.view().list())
	}
}

// reportCaughtUp marks this learner Ready in the directory once it has
// applied, in every shard, everything its leader had committed when
// asked (a ReadIndex, which a learner forwards to the leader).
func (n *Node) reportCaughtUp(d *directory) {
	if len(n.shards) != d.Shards {
		return // a node still learning the cluster's shards (join.go)
	}
	var wg sync.WaitGroup
	var behind atomic.Bool
	for _, s := range n.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := n.nh.ReadIndex(s.id, catchUpTimeout)
			if err != nil {
				behind.Store(true)
				return
			}
			if ok, _ := n.completed(rs); !ok {
				behind.Store(true)
			}
		}()
	}
	wg.Wait()
	if behind.Load() {
		return
	}
	n.failpoint(failBeforeReady)
	nd := d.clone()
	i := slices.IndexFunc(nd.Members, func(m member) bool { return m.ID == n.cfg.ID })
	nd.Members[i].Ready = true
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := n.writeDirectory(ctx, d, nd); err == nil {
		n.log.Info("caught up on every shard: ready to be promoted", "id", n.cfg.ID)
	}
}
