package harness

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Links are the Raft links of a cluster started with Options.Links: each
// node advertises (in --peers) the address of a proxy of its own, which
// forwards to the Raft port it really binds (batond --raft-listen). Every
// Raft connection to a node goes through that node's proxy, and dragonboat
// states the sender's advertised address in the first message batch of each
// connection, so a proxy knows both ends of every connection it carries.
// Isolate therefore really stops all Raft traffic to and from a node. Client
// traffic does not go through the proxies.
//
// dragonboat's connections are one-way: a node sends its messages to a peer
// on connections it dials itself, and the peer answers on its own. Cut uses
// that to cut one direction of a link only.
type Links struct {
	mu       sync.Mutex
	proxies  map[int]*proxy // node id -> the proxy in front of it
	isolated map[int]bool
	cut      map[link]bool // one-way cuts, by sender and receiver
}

// link is the direction of a Raft link: messages sent by node from to node
// to.
type link struct{ from, to int }

// NewLinks returns an empty set, to pass in Options.Links.
func NewLinks() *Links {
	return &Links{proxies: map[int]*proxy{}, isolated: map[int]bool{}, cut: map[link]bool{}}
}

// Isolate cuts every Raft link to and from node id: open connections are
// closed and new ones refused until Heal.
func (l *Links) Isolate(id int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.isolated[id] = true
	for _, p := range l.proxies {
		p.closeMatching(l.isolatedLocked)
	}
}

// Cut stops the Raft messages node from sends to node to, and only those:
// its open connections to to's proxy are closed and new ones refused until
// Heal, while to's messages to from still flow. A connection whose sender
// the proxy could not tell (see Links) is not cut.
func (l *Links) Cut(from, to int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut[link{from, to}] = true
	for _, p := range l.proxies {
		p.closeMatching(l.isolatedLocked)
	}
}

// Heal restores every link: it ends every Isolate and every Cut.
func (l *Links) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.isolated)
	clear(l.cut)
}

// isolatedLocked reports whether a connection from one node to another
// must not flow, isolated or cut; mu must be held. from is 0 when unknown.
func (l *Links) isolatedLocked(from, to int) bool {
	return l.isolated[to] || (from != 0 && (l.isolated[from] || l.cut[link{from, to}]))
}

// blocked is isolatedLocked for the proxies' goroutines.
func (l *Links) blocked(from, to int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.isolatedLocked(from, to)
}

// Listen starts a proxy in front of a Raft port that a node started
// outside StartCluster binds (target, its --raft-listen), and returns the
// address to advertise for it (the RAFT_ADDR of its --join or --peers).
// id names the node to Isolate and Cut: any number no other proxy of l
// has, the node's --id or another (a node that joins learns its id only
// once the cluster added it, at the address returned here).
func (l *Links) Listen(t testing.TB, id int, target string) string {
	t.Helper()
	return l.listen(t, id, target)
}

// listen starts (or restarts, on new ports) the proxy in front of node id,
// which binds target, and returns the address to advertise for it.
func (l *Links) listen(t testing.TB, id int, target string) string {
	t.Helper()
	l.mu.Lock()
	if old := l.proxies[id]; old != nil {
		old.close()
	}
	p := startProxy(t, l, id, target)
	l.proxies[id] = p
	l.mu.Unlock()
	return p.addr
}

// senderOf finds which node opened a connection from its first bytes: the
// protobuf-encoded advertised address (a length byte, then the address).
func (l *Links) senderOf(first []byte) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, p := range l.proxies {
		if bytes.Contains(first, append([]byte{byte(len(p.addr))}, p.addr...)) {
			return id
		}
	}
	return 0
}

// proxy forwards the Raft connections to one node.
type proxy struct {
	links  *Links
	to     int // the node behind the proxy
	addr   string
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]int // open connections, by sending node (0: unknown)
}

func startProxy(t testing.TB, l *Links, to int, target string) *proxy {
	t.Helper()
	ln, err := listenNew()
	if err != nil {
		t.Fatalf("harness: proxy: %v", err)
	}
	p := &proxy{links: l, to: to, addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]int{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		go p.forward(c)
	}
}

// forward identifies the sender from the first bytes, then pipes the
// connection to the node unless that link is cut.
func (p *proxy) forward(in net.Conn) {
	defer in.Close()
	first, from := p.identify(in)
	if first == nil {
		return
	}
	if p.links.blocked(from, p.to) {
		return
	}
	out, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	if _, err := out.Write(first); err != nil || !p.track(from, in, out) {
		return
	}
	defer p.untrack(in, out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done // either side ending ends both
	in.Close()
	out.Close()
	<-done
}

// identify reads the start of a connection until it names its sender: the
// magic number, header and message batch come in separate writes. It gives
// up (sender 0, unknown) after maxPeek bytes or a second; nil means the
// connection ended first.
func (p *proxy) identify(in net.Conn) ([]byte, int) {
	const maxPeek = 64 << 10
	buf := make([]byte, 0, 4096)
	_ = in.SetReadDeadline(time.Now().Add(time.Second))
	defer func() { _ = in.SetReadDeadline(time.Time{}) }()
	for len(buf) < maxPeek {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := in.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if from := p.links.senderOf(buf); from != 0 {
			return buf, from
		}
		if err != nil {
			if len(buf) > 0 && IsTimeout(err) {
				break // a quiet sender: forward what came, unknown
			}
			return nil, 0
		}
	}
	return buf, 0
}

// track registers a connection pair of node from; false if it is cut.
// Locks go Links before proxy, as in Isolate.
func (p *proxy) track(from int, cs ...net.Conn) bool {
	p.links.mu.Lock()
	defer p.links.mu.Unlock()
	if p.links.isolatedLocked(from, p.to) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = from
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// closeMatching closes the open connections whose link is now cut. The
// Links' lock is held by the caller, so cut is called without taking it.
func (p *proxy) closeMatching(cut func(from, to int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, from := range p.conns {
		if cut(from, p.to) {
			c.Close()
		}
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.closeMatching(func(int, int) bool { return true })
}
