package main_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
)

// Access control and TLS (protocol 1.2) against real batond processes:
// Raft over mutual TLS, the TLS client listener, the shared secret, and
// the flags that refuse to start. Certificates are made by each test
// (harness.NewCA).

// raftTLS gives each of n nodes a certificate of ca, but those of
// foreign, which get one of a CA of their own (and trust only it).
func raftTLS(t *testing.T, n int, ca *harness.CA, foreign ...int) func(id int) []string {
	certs := map[int][]string{}
	for id := 1; id <= n; id++ {
		name := fmt.Sprintf("node%d", id)
		certs[id] = ca.RaftArgs(ca.Issue(name))
		for _, f := range foreign {
			if f == id {
				other := harness.NewCA(t, "other-"+name)
				certs[id] = other.RaftArgs(other.Issue(name))
			}
		}
	}
	return func(id int) []string { return certs[id] }
}

// TestRaftMutualTLS: a cluster whose Raft links are mutual TLS elects,
// serves, and fails over.
func TestRaftMutualTLS(t *testing.T) {
	t.Parallel()
	ca := harness.NewCA(t, "baton-raft")
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{Shards: 2, NodeArgs: raftTLS(t, 3, ca)})
	waitLeads(t, nodes, nodes[0], 15*time.Second)
	c := harness.Dial(t, nodes[0].ClientAddr)
	held := acquire(t, c, "mtls/held", 60000)

	nodes[0].Kill()
	waitLeads(t, nodes[1:], nodes[1], 10*time.Second)
	queryHeld(t, harness.Dial(t, nodes[1].ClientAddr), "mtls/held", held)
}

// TestRaftForeignCertificate: a node whose certificate another CA signed
// cannot join: the other two elect and serve, and it never learns of a
// leader (MOVED would say it had).
func TestRaftForeignCertificate(t *testing.T) {
	t.Parallel()
	ca := harness.NewCA(t, "baton-raft")
	nodes := harness.StartCluster(t, harness.Bin(t), 3, harness.Options{
		Shards: 2, NodeArgs: raftTLS(t, 3, ca, 3), Unready: []int{3},
	})
	waitLeads(t, nodes[:2], nodes[0], 15*time.Second)
	acquire(t, harness.Dial(t, nodes[0].ClientAddr), "foreign/k", 60000)

	// Long enough for several elections and heartbeats: node 1 leads all
	// along and sends to node 3, which would learn of it from any message.
	until := time.Now().Add(3 * time.Second)
	asked := 0
	for time.Now().Before(until) {
		for _, k := range clusterKeys {
			got := ask(nodes[2].ClientAddr, "Q "+k)
			if !strings.Contains(got, " ERR unavailable") {
				t.Fatalf("node 3, with a foreign certificate, answers %q; want ERR unavailable", got)
			}
			asked++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !nodes[2].Running() {
		t.Fatal("node 3 exited; it should run, cut off")
	}
	t.Logf("node 3 answered ERR unavailable %d times in 3 s", asked)
}

// TestClientTLS: the same protocol over TLS, next to the plain port, with
// disconnects handled as on it.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	ca := harness.NewCA(t, "baton-clients")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, TLS: &harness.ServerTLS{Cert: ca.Issue("server")}})
	cfg := &tls.Config{RootCAs: ca.Pool}
	c := harness.DialTLS(t, n.TLSAddr, cfg)
	tok := acquire(t, c, "tls/k", 60000)
	plain := harness.Dial(t, n.ClientAddr)
	queryHeld(t, plain, "tls/k", tok)

	// A waiter whose TLS connection closes is abandoned: the release
	// frees the key instead of granting it to nobody.
	gone := harness.DialTLS(t, n.TLSAddr, cfg)
	gone.Send("A tls/k 60000 0", "Q tls/k")
	expectHeld(t, gone, "tls/k", tok)
	gone.Close()
	do(t, c, fmt.Sprintf("R tls/k %d", tok), "R tls/k OK")
	eventually(t, plain, "tls/k", "Q tls/k FREE", 2*time.Second)

	// The server's certificate is checked: a client that trusts another CA
	// does not get through.
	if conn, err := tls.Dial("tcp", n.TLSAddr, &tls.Config{RootCAs: harness.NewCA(t, "other").Pool}); err == nil {
		conn.Close()
		t.Fatal("handshake succeeded against a CA the client does not trust")
	}
	// Plain text on the TLS port is not served.
	if got := ask(n.TLSAddr, "Q tls/k"); strings.Contains(got, "FREE") {
		t.Fatalf("plain text on the TLS port answered %q", got)
	}
}

// TestClientTLSCertificates: with --tls-client-ca, a client with a
// certificate of that CA is served, one without is refused.
func TestClientTLSCertificates(t *testing.T) {
	t.Parallel()
	ca, clients := harness.NewCA(t, "baton-server"), harness.NewCA(t, "baton-clients")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{
		Shards: 2, TLS: &harness.ServerTLS{Cert: ca.Issue("server"), ClientCA: clients.File},
	})
	c := harness.DialTLS(t, n.TLSAddr, &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{clients.Issue("app").TLS}})
	acquire(t, c, "tlscert/k", 60000)

	conn, err := tls.Dial("tcp", n.TLSAddr, &tls.Config{RootCAs: ca.Pool})
	if err == nil {
		// TLS 1.3: the refusal follows the client's end of the handshake.
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte("Q tlscert/k\n"))
		var got []byte
		got, err = io.ReadAll(conn)
		if err == nil {
			t.Fatalf("served without a client certificate: %q", got)
		}
	}
	t.Logf("without a client certificate: %v", err)
	// The plain port is not covered by --tls-client-ca.
	queryHeldAny(t, harness.Dial(t, n.ClientAddr), "tlscert/k")
}

// queryHeldAny fails t unless key is held.
func queryHeldAny(t *testing.T, c *harness.Conn, key string) {
	t.Helper()
	if held, _, _ := query(t, c, key); !held {
		t.Fatalf("%s is not held", key)
	}
}

// TestAuth: with --auth-file, nothing is served before the right H, on
// either port.
func TestAuth(t *testing.T) {
	t.Parallel()
	const secret = "correct-horse-battery-staple"
	ca := harness.NewCA(t, "baton-clients")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{
		Shards: 2, Secret: secret, TLS: &harness.ServerTLS{Cert: ca.Issue("server")},
	})
	refused := func(t *testing.T, c *harness.Conn, lines ...string) {
		t.Helper()
		c.Send(lines...)
		c.Expect(t, "H - ERR auth")
		if line, err := c.ReadLine(5 * time.Second); err == nil {
			t.Fatalf("after H - ERR auth: %q, want the connection closed", line)
		} else if harness.IsTimeout(err) {
			t.Fatal("the connection is still open after H - ERR auth")
		}
	}
	t.Run("NoSecret", func(t *testing.T) {
		refused(t, harness.Dial(t, n.ClientAddr), "A auth/none 60000 -1")
	})
	t.Run("MembershipWithoutSecret", func(t *testing.T) {
		// A membership change is an operator's act (protocol 1.3).
		refused(t, harness.Dial(t, n.ClientAddr), "M - ADD 127.0.0.1:1/127.0.0.1:2")
		refused(t, harness.Dial(t, n.ClientAddr), "M - WRONG", "C -")
	})
	t.Run("WrongSecret", func(t *testing.T) {
		refused(t, harness.Dial(t, n.ClientAddr), "H "+secret+"x", "A auth/wrong 60000 -1")
	})
	t.Run("RequestBeforeH", func(t *testing.T) {
		refused(t, harness.Dial(t, n.ClientAddr), "Q auth/before", "H "+secret, "A auth/before 60000 -1")
	})
	t.Run("RightSecret", func(t *testing.T) {
		c := harness.Dial(t, n.ClientAddr)
		// Requests pipelined behind the H in the same packet are served.
		c.Send("H "+secret, "A auth/right 60000 -1")
		c.Expect(t, "H - OK")
		tok := readGrant(t, c, "auth/right", answerWithin)
		queryHeld(t, c, "auth/right", tok)
	})
	t.Run("OverTLS", func(t *testing.T) {
		cfg := &tls.Config{RootCAs: ca.Pool}
		refused(t, harness.DialTLS(t, n.TLSAddr, cfg), "Q auth/tls")
		c := harness.DialTLS(t, n.TLSAddr, cfg).Hello(t, secret)
		acquire(t, c, "auth/tls", 60000)
	})
	// Nothing the refused connections sent was served.
	c := harness.Dial(t, n.ClientAddr).Hello(t, secret)
	for _, k := range []string{"auth/none", "auth/wrong", "auth/before"} {
		queryFree(t, c, k)
	}
}

// TestHTTPSecret: with --auth-file, the HTTP endpoints that show the lock
// table or the topology, or cost CPU, need the secret as a Bearer token;
// /healthz and /metrics do not. With --http-tls they are served over TLS
// with the client listener's certificate, and plain HTTP is not.
func TestHTTPSecret(t *testing.T) {
	t.Parallel()
	const secret = "correct-horse-battery-staple"
	ca := harness.NewCA(t, "baton-clients")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{
		Shards: 1, Secret: secret, HTTP: true, Args: []string{"--http-tls"},
		TLS: &harness.ServerTLS{Cert: ca.Issue("server")},
	})
	httpsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	get := func(t *testing.T, path, auth string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "https://"+n.HTTPAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := httpsClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path string
		open bool // served without the secret
	}{
		{"/healthz", true},
		{"/metrics", true},
		{"/status", false},
		{"/backup", false},
		{"/debug/pprof/", false},
		{"/debug/pprof/symbol", false},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			want := http.StatusOK
			if !tc.open {
				want = http.StatusUnauthorized
			}
			for _, auth := range []string{"", "Bearer " + secret + "x", "Bearer", "Basic " + secret, secret} {
				if got := get(t, tc.path, auth); got != want {
					t.Errorf("GET %s with Authorization %q: %d, want %d", tc.path, auth, got, want)
				}
			}
			if got := get(t, tc.path, "Bearer "+secret); got != http.StatusOK {
				t.Errorf("GET %s with the secret: %d, want 200", tc.path, got)
			}
		})
	}
	// Plain HTTP on the TLS port gets no page.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + n.HTTPAddr + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP on an --http-tls port answered 200")
		}
	}
}

// TestSecurityFlagsRefused: settings that cannot work stop batond at
// start, with a reason that names the flag.
func TestSecurityFlagsRefused(t *testing.T) {
	t.Parallel()
	ca := harness.NewCA(t, "baton")
	cert := ca.Issue("node")
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tlsAddr := harness.FreeAddr(t)
	for _, tc := range []struct {
		name  string
		args  []string
		words []string
	}{
		{"raft TLS without key", []string{"--raft-tls-ca", ca.File, "--raft-tls-cert", cert.CertFile}, []string{"--raft-tls-key"}},
		{"raft TLS without CA", []string{"--raft-tls-cert", cert.CertFile, "--raft-tls-key", cert.KeyFile}, []string{"--raft-tls-ca"}},
		{"raft TLS of another CA", harness.NewCA(t, "other").RaftArgs(cert), []string{"--raft-tls-cert"}},
		{"empty secret", []string{"--auth-file", file("empty", "\n")}, []string{"empty"}},
		{"secret with spaces", []string{"--auth-file", file("spaces", "two words\n")}, []string{"spaces"}},
		{"no secret file", []string{"--auth-file", filepath.Join(dir, "missing")}, []string{"--auth-file"}},
		{"TLS listener without certificate", []string{"--tls-listen", tlsAddr}, []string{"--tls-cert"}},
		{"certificate without key", []string{"--tls-listen", tlsAddr, "--tls-cert", cert.CertFile}, []string{"--tls-key"}},
		{"client CA without listener", []string{"--tls-client-ca", ca.File}, []string{"--tls-cert"}},
		{"key of another certificate", []string{"--tls-listen", tlsAddr, "--tls-cert", cert.CertFile, "--tls-key", ca.Issue("x").KeyFile},
			[]string{"--tls-key"}},
		{"HTTP TLS without a certificate", []string{"--http", harness.FreeAddr(t), "--http-tls"}, []string{"--http-tls", "--tls-cert"}},
		{"HTTP TLS without --http", []string{"--http-tls", "--tls-listen", tlsAddr, "--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile},
			[]string{"--http-tls", "--http"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(singleNodeArgs(t, filepath.Join(t.TempDir(), "data")), tc.args...)
			expectRefusal(t, harness.Run(t, harness.Bin(t), "", 30*time.Second, args...), tc.words...)
		})
	}
}
