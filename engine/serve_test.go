package engine

import (
	"slices"
	"testing"
)

// testNode is a one-node cluster's Node with one serving shard and no Raft,
// whose connections need secret ("" for none): enough for requests that
// are answered without a proposal (Q, H, bad lines).
func testNode(t *testing.T, secret string) *Node {
	t.Helper()
	n := testShard(t).node
	if secret != "" {
		n.secretHash = hashSecret([]byte(secret))
	}
	return n
}

// TestHello feeds connections their first bytes, as one packet or several,
// and checks what is answered and whether the connection is to be closed.
func TestHello(t *testing.T) {
	const secret = "s3cret"
	for _, tc := range []struct {
		name    string
		secret  string   // the node's; "" for none
		packets []string // what the connection receives, read by read
		answers []string
		closed  bool
	}{
		{"right secret", secret, []string{"H s3cret\n"}, []string{"H - OK"}, false},
		{"right secret, then served", secret, []string{"H s3cret\n", "Q k\n"}, []string{"H - OK", "Q k FREE"}, false},
		{"pipelined after H", secret, []string{"H s3cret\r\nQ k\nQ j\n"}, []string{"H - OK", "Q k FREE", "Q j FREE"}, false},
		{"H split over packets", secret, []string{"H s3", "cret\nQ", " k\n"}, []string{"H - OK", "Q k FREE"}, false},
		{"no H", secret, []string{"Q k\n"}, []string{"H - ERR auth"}, true},
		{"request before H", secret, []string{"Q k\nH s3cret\nQ j\n"}, []string{"H - ERR auth"}, true},
		{"wrong secret", secret, []string{"H wrong\nQ k\n"}, []string{"H - ERR auth"}, true},
		{"prefix of the secret", secret, []string{"H s3cre\n"}, []string{"H - ERR auth"}, true},
		{"secret and more", secret, []string{"H s3crets\n"}, []string{"H - ERR auth"}, true},
		{"extra field", secret, []string{"H s3cret x\n"}, []string{"H - ERR auth"}, true},
		{"H alone", secret, []string{"H\n"}, []string{"H - ERR auth"}, true},
		{"empty first line", secret, []string{"\nH s3cret\n"}, []string{"H - ERR auth"}, true},
		{"bad line first", secret, []string{"x y\n"}, []string{"H - ERR auth"}, true},
		{"wrong secret later", secret, []string{"H s3cret\n", "H wrong\nQ k\n"}, []string{"H - OK", "H - ERR auth"}, true},
		{"overlong line first", secret, []string{string(make([]byte, 2000))}, []string{"? - ERR toolong line longer than 1024 bytes"}, true},
		// A node without a secret answers H OK, so that a client configured
		// with one can use it, and serves everything else as before.
		{"no secret needed", "", []string{"Q k\n"}, []string{"Q k FREE"}, false},
		{"H to a node without secret", "", []string{"H anything\nQ k\n"}, []string{"H - OK", "Q k FREE"}, false},
		{"bad H to a node without secret", "", []string{"H\nH a b\n"},
			[]string{"H - ERR badrequest missing secret", "H - ERR badrequest too many fields"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testNode(t, tc.secret)
			cs := n.openConn(fakeConn{})
			var in []byte
			closed := false
			for _, p := range tc.packets {
				in = append(in, p...)
				used, c := n.serveInput(cs, in)
				in = in[used:]
				if closed = c; closed {
					break
				}
			}
			if got := answers(cs); !slices.Equal(got, tc.answers) || closed != tc.closed {
				t.Errorf("answers %q, closed %v; want %q, closed %v", got, closed, tc.answers, tc.closed)
			}
		})
	}
}

// TestServeCounts: whatever its transport, a connection is counted in and
// out, and every line it sends is counted: a request by its op (H
// included, even one refused, and a request refused before H), a line that
// does not parse as a bad request.
func TestServeCounts(t *testing.T) {
	n := testNode(t, "s3cret")
	m := n.metrics
	before := samples(t, m)
	cs := n.openConn(fakeConn{})
	moved(t, m, before, map[string]float64{"baton_connections_open": 1, "baton_connections_accepted_total": 1})
	n.serveInput(cs, []byte("H s3cret\nQ k\nx\nH\n"))
	other := n.openConn(fakeConn{})
	n.serveInput(other, []byte("Q k\n"))
	n.closeConn(cs)
	n.closeConn(other)
	moved(t, m, before, map[string]float64{
		"baton_connections_open": 0, "baton_connections_accepted_total": 2,
		`baton_requests_total{op="H"}`: 1, `baton_requests_total{op="Q"}`: 2, "baton_bad_requests_total": 2,
		`baton_answers_total{op="H",answer="OK"}`: 1, `baton_answers_total{op="Q",answer="FREE"}`: 1,
		`baton_answers_total{op="?",answer="ERR",code="badrequest"}`: 1,
		`baton_answers_total{op="H",answer="ERR",code="auth"}`:       2, // the malformed H, the Q before H
		`baton_answers_total{op="H",answer="ERR",code="badrequest"}`: 0,
	})
	if c := n.adm.conns.Load(); c != 0 {
		t.Errorf("%d connections counted after both closed", c)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7700": true, "127.1.2.3:7700": true, "[::1]:7700": true, "localhost:7700": true,
		"0.0.0.0:7700": false, ":7700": false, "[::]:7700": false, "10.0.0.1:7700": false,
		"baton.example:7700": false, "nonsense": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
