package raftnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/tools/harness"
	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// receiver is a started Transport that records what it is handed.
type receiver struct {
	*Transport
	addr    string
	batches chan pb.MessageBatch
	mu      sync.Mutex
	chunks  []pb.Chunk
	logs    *harness.SyncBuffer
}

// nodeHostConfig is the part of a NodeHost's configuration the transport
// reads: its address and, when tlsCA is set, mutual TLS with cert.
func nodeHostConfig(addr string, ca *harness.CA, cert harness.Cert) config.NodeHostConfig {
	cfg := config.NodeHostConfig{RaftAddress: addr}
	if ca != nil {
		cfg.MutualTLS, cfg.CAFile, cfg.CertFile, cfg.KeyFile = true, ca.File, cert.CertFile, cert.KeyFile
	}
	return cfg
}

// startReceiver starts a transport on a free port; onChunk, when set,
// runs for every chunk after it is recorded.
func startReceiver(t *testing.T, ca *harness.CA, cert harness.Cert, onChunk func(pb.Chunk)) *receiver {
	t.Helper()
	return startReceiverAt(t, harness.FreeAddr(t), ca, cert, onChunk)
}

// startReceiverAt is startReceiver on addr.
func startReceiverAt(t *testing.T, addr string, ca *harness.CA, cert harness.Cert, onChunk func(pb.Chunk)) *receiver {
	t.Helper()
	r := &receiver{addr: addr, batches: make(chan pb.MessageBatch, 1024), logs: &harness.SyncBuffer{}}
	f := &Factory{Log: slog.New(slog.NewTextHandler(r.logs, nil))}
	tr := f.Create(nodeHostConfig(r.addr, ca, cert),
		func(b pb.MessageBatch) { r.batches <- b },
		func(c pb.Chunk) bool {
			r.mu.Lock()
			r.chunks = append(r.chunks, c)
			r.mu.Unlock()
			if onChunk != nil {
				onChunk(c)
			}
			return true
		})
	r.Transport = tr.(*Transport)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// newSender is a transport that is only dialled from, never started.
func newSender(ca *harness.CA, cert harness.Cert) *Transport {
	f := &Factory{}
	return f.Create(nodeHostConfig("127.0.0.1:1", ca, cert), nil, nil).(*Transport)
}

func testBatch(i int) pb.MessageBatch {
	return pb.MessageBatch{
		SourceAddress: "127.0.0.1:1",
		BinVer:        1,
		Requests: []pb.Message{{
			Type: pb.Replicate, ShardID: uint64(i%4 + 1), From: 1, To: 2, Term: 7, LogIndex: uint64(i),
			Entries: []pb.Entry{{Index: uint64(i) + 1, Term: 7, Cmd: bytes.Repeat([]byte{byte(i)}, i*37%3000)}},
		}},
	}
}

func sameBatch(a, b pb.MessageBatch) bool {
	if a.SourceAddress != b.SourceAddress || len(a.Requests) != len(b.Requests) {
		return false
	}
	for i := range a.Requests {
		x, y := a.Requests[i], b.Requests[i]
		if x.Type != y.Type || x.ShardID != y.ShardID || x.LogIndex != y.LogIndex || len(x.Entries) != len(y.Entries) {
			return false
		}
		for j := range x.Entries {
			if x.Entries[j].Index != y.Entries[j].Index || !bytes.Equal(x.Entries[j].Cmd, y.Entries[j].Cmd) {
				return false
			}
		}
	}
	return true
}

// exchange sends n batches from s to r and checks that they arrive, whole
// and in order.
func exchange(t *testing.T, s *Transport, r *receiver, n int) {
	t.Helper()
	conn, err := s.GetConnection(context.Background(), r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range n {
		if err := conn.SendMessageBatch(testBatch(i)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	for i := range n {
		select {
		case got := <-r.batches:
			if !sameBatch(got, testBatch(i)) {
				t.Fatalf("batch %d arrived as %+v", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d did not arrive", i)
		}
	}
}

func TestBatchesArriveInOrder(t *testing.T) {
	r := startReceiver(t, nil, harness.Cert{}, nil)
	exchange(t, newSender(nil, harness.Cert{}), r, 500)
}

// TestLargeBatch: a batch far larger than the reader's buffer and than the
// buffer a connection keeps arrives whole.
func TestLargeBatch(t *testing.T) {
	r := startReceiver(t, nil, harness.Cert{}, nil)
	s := newSender(nil, harness.Cert{})
	conn, err := s.GetConnection(context.Background(), r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	big := testBatch(1)
	big.Requests[0].Entries[0].Cmd = bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB
	for range 2 {
		if err := conn.SendMessageBatch(big); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-r.batches:
			if !sameBatch(got, big) {
				t.Fatal("the large batch arrived changed")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the large batch did not arrive")
		}
	}
}

// TestSnapshotCloseWaitsForChunks: Close of a snapshot connection returns
// only after the receiver has handled every chunk sent on it, even when
// the receiver is slower than the sender.
func TestSnapshotCloseWaitsForChunks(t *testing.T) {
	r := startReceiver(t, nil, harness.Cert{}, func(pb.Chunk) { time.Sleep(2 * time.Millisecond) })
	s := newSender(nil, harness.Cert{})
	conn, err := s.GetSnapshotConnection(context.Background(), r.addr)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		c := pb.Chunk{ShardID: 1, ReplicaID: 2, ChunkId: uint64(i), ChunkCount: n, Data: bytes.Repeat([]byte{byte(i)}, 4096)}
		if err := conn.SendChunk(c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	conn.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.chunks) != n {
		t.Fatalf("%d chunks handled when Close returned, want %d", len(r.chunks), n)
	}
	for i, c := range r.chunks {
		if c.ChunkId != uint64(i) || !bytes.Equal(c.Data, bytes.Repeat([]byte{byte(i)}, 4096)) {
			t.Fatalf("chunk %d arrived as id %d, %d bytes", i, c.ChunkId, len(c.Data))
		}
	}
}

// expectClosed waits for the server to close c: an end of stream, or a
// reset when the server closed with bytes of c still unread.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %d bytes, then %v; want the connection closed", n, err)
	}
}

// sendRaw dials addr over plain TCP, writes b and waits for the server to
// close the connection.
func sendRaw(t *testing.T, addr string, b []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
}

// TestRefusesAnotherTransport: a peer that speaks dragonboat's transport
// (its magic number first) is refused and logged, and the transport goes
// on serving its own.
func TestRefusesAnotherTransport(t *testing.T) {
	r := startReceiver(t, nil, harness.Cert{}, nil)
	sendRaw(t, r.addr, []byte{0xAE, 0x7D, 1, 2, 3, 4, 5, 6, 7, 8})
	if logs := r.logs.String(); !strings.Contains(logs, "not baton's raft transport") {
		t.Fatalf("no log line of the refusal; logs:\n%s", logs)
	}
	exchange(t, newSender(nil, harness.Cert{}), r, 3)
}

// TestBadFrameEndsConnection: a frame that does not check ends its
// connection, nothing of it is handed on, and new connections work.
func TestBadFrameEndsConnection(t *testing.T) {
	r := startReceiver(t, nil, harness.Cert{}, nil)
	frame := encodeFrame(frameBatch, []byte("not a batch, and a wrong checksum"))
	frame[len(frame)-1] ^= 1
	sendRaw(t, r.addr, append(preamble[:], frame...))

	// A frame that checks but does not unmarshal ends it too.
	sendRaw(t, r.addr, append(preamble[:], encodeFrame(frameBatch, []byte{0xff, 0xff, 0xff})...))
	select {
	case b := <-r.batches:
		t.Fatalf("a bad frame was handed on: %+v", b)
	default:
	}
	exchange(t, newSender(nil, harness.Cert{}), r, 3)
}

// TestMutualTLS: with the NodeHost's mutual TLS, batches travel between
// nodes with certificates of the CA, and a plain TCP peer gets nothing in.
func TestMutualTLS(t *testing.T) {
	ca := harness.NewCA(t, "raft-ca")
	r := startReceiver(t, ca, ca.Issue("node-1"), nil)
	exchange(t, newSender(ca, ca.Issue("node-2")), r, 20)

	sendRaw(t, r.addr, append(preamble[:], encodeFrame(frameBatch, nil)...))
	select {
	case b := <-r.batches:
		t.Fatalf("a plain TCP peer got a batch in: %+v", b)
	default:
	}

	other := harness.NewCA(t, "other-ca")
	if _, err := newSender(other, other.Issue("intruder")).GetConnection(context.Background(), r.addr); err == nil {
		t.Fatal("a node with another CA's certificate connected")
	}
}

// TestCloseEndsAcceptedConnections: Close returns with a peer's
// connection still open, and the peer's sends then fail.
func TestCloseEndsAcceptedConnections(t *testing.T) {
	r := startReceiver(t, nil, harness.Cert{}, nil)
	conn, err := newSender(nil, harness.Cert{}).GetConnection(context.Background(), r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(testBatch(1)); err != nil {
		t.Fatal(err)
	}
	<-r.batches
	done := make(chan struct{})
	go func() { _ = r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	deadline := time.Now().Add(10 * time.Second)
	for conn.SendMessageBatch(testBatch(2)) == nil {
		if time.Now().After(deadline) {
			t.Fatal("sends still succeed 10 s after the peer closed")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestValidate(t *testing.T) {
	f := &Factory{}
	for addr, want := range map[string]bool{
		"127.0.0.1:7701": true,
		"node-1:7701":    true,
		"[::1]:7701":     true,
		"127.0.0.1":      false,
		":7701":          false,
		"127.0.0.1:0":    false,
		"127.0.0.1:x":    false,
		"127.0.0.1:7e4":  false,
		"":               false,
	} {
		if got := f.Validate(addr); got != want {
			t.Errorf("Validate(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestPeerGoneAndBack: once the peer has closed the connection (its
// process ended), the connection knows without a write; the next batch
// fails at once while the peer is down, and goes on a new connection once
// it is back, instead of being written into the void. A live connection,
// meanwhile, is not taken for gone. With TLS too.
func TestPeerGoneAndBack(t *testing.T) {
	ca := harness.NewCA(t, "raft-ca")
	for _, tc := range []struct {
		name           string
		ca             *harness.CA
		server, client harness.Cert
	}{
		{"tcp", nil, harness.Cert{}, harness.Cert{}},
		{"mutual TLS", ca, ca.Issue("node-1"), ca.Issue("node-2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startReceiver(t, tc.ca, tc.server, nil)
			// leave connects, sends a batch, and closes the receiver.
			leave := func() *messageConn {
				c, err := newSender(tc.ca, tc.client).GetConnection(context.Background(), r.addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				conn := c.(*messageConn)
				if err := conn.SendMessageBatch(testBatch(1)); err != nil {
					t.Fatal(err)
				}
				<-r.batches
				select {
				case <-conn.gone:
					t.Fatal("a live connection was taken for gone")
				default:
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				select {
				case <-conn.gone:
				case <-time.After(10 * time.Second):
					t.Fatal("the peer's close went unnoticed for 10 s")
				}
				return conn
			}

			down := leave()
			if err := down.SendMessageBatch(testBatch(2)); err == nil {
				t.Fatal("a batch to a peer that is down was taken")
			}

			r = startReceiverAt(t, r.addr, tc.ca, tc.server, nil)
			back := leave()
			r = startReceiverAt(t, r.addr, tc.ca, tc.server, nil)
			if err := back.SendMessageBatch(testBatch(3)); err != nil {
				t.Fatalf("the first batch after the peer came back: %v", err)
			}
			select {
			case got := <-r.batches:
				if !sameBatch(got, testBatch(3)) {
					t.Fatalf("got %+v", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the first batch after the peer came back did not arrive")
			}
		})
	}
}
