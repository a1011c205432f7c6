package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// Ports for nodes and proxies. A port that a test finds free and hands to
// a batond it starts a moment later must not be taken meanwhile. Ports of
// the kernel's ephemeral range are the ones it gives every outgoing
// connection of every process (the other test binaries of go test ./...,
// their nodes' Raft and client connections): in a full test run one was
// taken so between its check and its bind (TestSnapshotBySize: address
// already in use). So the ports come from below that range, at random,
// where only a listener that names its port can land.

const (
	// lowestPort is the lowest port handed out: above the registered
	// ports of common servers (etcd 2379, Redis 6379, Prometheus 9090).
	lowestPort = 10000
	// portTries is how many random ports listenLocal tries before it
	// takes one from the kernel.
	portTries = 100
)

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
//
// The port is found by listening on it and closing the listener, so
// another process can take it before batond binds it. The port is one
// below the kernel's ephemeral range where the range is known (listenLocal),
// so that no outgoing connection of any process is given it meanwhile;
// StartNode and StartCluster retry once on new ports when a node reports
// "address in use".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrs(t, 1)[0]
}

// FreeAddrs returns n distinct free 127.0.0.1 addresses (see FreeAddr).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := freeAddrs(n)
	if err != nil {
		t.Fatalf("harness: free ports: %v", err)
	}
	return addrs
}

// handedOut is every address freeAddrs or listenNew returned in this process: a port
// closed after one call may come back from the kernel in the next, while
// the first caller is still about to bind it (a chaos run once got one port
// as a node's Raft address and another node's client address).
var handedOut struct {
	sync.Mutex
	addrs map[string]bool
}

// freeAddrs returns n ports of 127.0.0.1 that it (or listenNew) never
// returned before, distinct from each other and from those of earlier
// calls.
func freeAddrs(n int) ([]string, error) {
	ls, err := newListeners(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 0, n)
	for _, l := range ls {
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	return addrs, nil
}

// listenNew listens on a port of 127.0.0.1 that freeAddrs never returned:
// a proxy's port must not be one that freeAddrs returned, closed, to a
// node about to bind it (a partition test once got one port as node 1's
// Raft address, a proxy's, and node 2's client address).
func listenNew() (net.Listener, error) {
	ls, err := newListeners(1)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// newListeners returns n open listeners on ports never handed out before
// in this process, and records them as handed out. It keeps every listener
// open until it has n, so that the kernel cannot give one port twice.
func newListeners(n int) ([]net.Listener, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.addrs == nil || len(handedOut.addrs) > 10_000 {
		// Forget the oldest calls' ports rather than run out of new ones
		// (there are about 20,000 to choose from): theirs were bound or
		// given up long ago.
		handedOut.addrs = map[string]bool{}
	}
	var rejected, kept []net.Listener
	defer func() {
		for _, l := range rejected {
			l.Close()
		}
	}()
	for len(kept) < n {
		l, err := listenLocal()
		if err != nil {
			for _, k := range kept {
				k.Close()
			}
			return nil, err
		}
		if a := l.Addr().String(); !handedOut.addrs[a] {
			handedOut.addrs[a] = true
			kept = append(kept, l)
		} else {
			rejected = append(rejected, l)
		}
	}
	return kept, nil
}

// listenLocal listens on a free port of 127.0.0.1 below the ephemeral
// range, chosen at random, or on one the kernel picks where the range is
// unknown or every try was taken.
func listenLocal() (net.Listener, error) {
	if top := ephemeralLow(); top > lowestPort {
		for range portTries {
			port := lowestPort + rand.IntN(top-lowestPort)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux),
// or 0 where it cannot be read.
var ephemeralLow = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0
	}
	return low
})
