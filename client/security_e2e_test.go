package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// TestSecureCluster: a three-node cluster with everything on (Raft over
// mutual TLS, clients over TLS, a shared secret), used by a client that
// knows one follower's TLS address only: it follows MOVED to the leader's
// TLS address, saying H on each new connection, and when the leader dies
// it fails over to the next, again with H.
func TestSecureCluster(t *testing.T) {
	t.Parallel()
	const secret = "cluster-secret"
	ca := harness.NewCA(t, "baton")
	raft := map[int][]string{}
	for id := 1; id <= 3; id++ {
		raft[id] = ca.RaftArgs(ca.Issue(fmt.Sprintf("node%d", id)))
	}
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{
		Shards: 2, Secret: secret, TLS: &harness.ServerTLS{Cert: ca.Issue("clients")},
		NodeArgs: func(id int) []string { return raft[id] },
	})
	settledLeader(t, nodes, "secure/a")
	c := newTestClientWith(t, []string{nodes[1].TLSAddr}, WithTLS(&tls.Config{RootCAs: ca.Pool}), WithSecret(secret))
	ctx := ctxFor(t, 60*time.Second)
	l, err := c.Acquire(ctx, "secure/a", time.Minute, WaitForever)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	preferred := c.preferred
	c.mu.Unlock()
	if preferred != nodes[0].TLSAddr {
		t.Fatalf("MOVED led to %q, want node 1's TLS address %s", preferred, nodes[0].TLSAddr)
	}

	nodes[0].Kill()
	l2, err := c.Acquire(ctx, "secure/b", time.Minute, WaitForever)
	if err != nil {
		t.Fatalf("after the leader died: %v", err)
	}
	st, err := c.Query(ctx, "secure/a")
	if err != nil || !st.Held || st.Token != l.Token() {
		t.Fatalf("secure/a after failover: %+v, %v; want held by %d", st, err, l.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The same cluster turns away a client with the wrong secret, or
	// without one, at once.
	for _, opts := range [][]Option{{WithSecret("wrong")}, nil} {
		bad := newTestClientWith(t, []string{nodes[1].ClientAddr}, opts...)
		start := time.Now()
		if _, err := bad.Query(ctx, "secure/a"); !errors.Is(err, ErrAuth) {
			t.Fatalf("error %v, want ErrAuth", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("ErrAuth after %v", d)
		}
	}
}

// TestClientCertificate: a server with --tls-client-ca serves a client
// with a certificate of that CA and not one without.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	ca, clients := harness.NewCA(t, "server"), harness.NewCA(t, "clients")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{
		Shards: 2, TLS: &harness.ServerTLS{Cert: ca.Issue("server"), ClientCA: clients.File},
	})
	ctx := ctxFor(t, 30*time.Second)
	good := newTestClientWith(t, []string{n.TLSAddr},
		WithTLS(&tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{clients.Issue("app").TLS}}))
	if _, err := good.TryAcquire(ctx, "cert/k", time.Minute); err != nil {
		t.Fatal(err)
	}
	bare := newTestClientWith(t, []string{n.TLSAddr}, WithTLS(&tls.Config{RootCAs: ca.Pool}))
	_, err := bare.Query(ctxFor(t, 5*time.Second), "cert/k")
	if err == nil {
		t.Fatal("served without a client certificate")
	}
	t.Logf("without a certificate: %v", err)
}
