package raftnet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/baton-dev/baton/engine/stagetrace"
)

// Name is the transport's name, as NodeHost reports it.
const Name = "baton-raftnet"

const (
	dialTimeout      = 5 * time.Second
	handshakeTimeout = 10 * time.Second
	// keepAlivePeriod is the TCP keep-alive of every connection: it is what
	// ends a connection whose peer vanished without closing it.
	keepAlivePeriod = 10 * time.Second
	// readBuffer is each accepted connection's buffered reader: several
	// frames of a busy peer, or one batch of a few hundred commands, per
	// read system call.
	readBuffer = 64 << 10
	// refusedEvery spaces the log lines about refused connections: a peer
	// on another transport dials again and again.
	refusedEvery = 10 * time.Second
)

// Transport is the raftio.ITransport of one NodeHost: a listener on its
// Raft address for the frames of its peers, and dialled connections to them.
// Create it with Factory.
type Transport struct {
	cfg     config.NodeHostConfig
	onBatch raftio.MessageHandler
	onChunk raftio.ChunkHandler
	log     *slog.Logger

	mu       sync.Mutex
	listener net.Listener
	accepted map[net.Conn]struct{} // open accepted connections, closed by Close
	closed   bool
	serving  sync.WaitGroup // the accept loop and every accepted connection

	lastRefused atomic.Int64 // unix nanoseconds of the last "refused" log line
}

var _ raftio.ITransport = (*Transport)(nil)

// Name returns Name.
func (t *Transport) Name() string { return Name }

// Start listens on the NodeHost's listen address (with the NodeHost's
// mutual TLS when it has one) and serves every connection a peer opens.
func (t *Transport) Start() error {
	tlsConfig, err := t.cfg.GetServerTLSConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", t.cfg.GetListenAddress())
	if err != nil {
		return err
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	t.mu.Lock()
	t.listener = ln
	t.mu.Unlock()
	t.serving.Add(1)
	go func() {
		defer t.serving.Done()
		t.acceptLoop(ln)
	}()
	return nil
}

// Close stops listening, closes every accepted connection and waits until
// nothing of the transport runs. Dialled connections are dragonboat's to
// close.
func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	if t.listener != nil {
		_ = t.listener.Close()
	}
	for c := range t.accepted {
		_ = c.Close()
	}
	t.mu.Unlock()
	t.serving.Wait()
	return nil
}

// GetConnection dials target for Raft message batches.
func (t *Transport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	return newMessageConn(c, func() (net.Conn, error) { return t.dial(ctx, target) }), nil
}

// GetSnapshotConnection dials target for the chunks of a snapshot.
func (t *Transport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	c, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	return &snapshotConn{sender{conn: c}}, nil
}

// dial connects to target, shakes hands when the NodeHost uses mutual TLS,
// and sends the preamble.
func (t *Transport) dial(ctx context.Context, target string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlivePeriod}
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	tlsConfig, err := t.cfg.GetClientTLSConfig(target)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if tlsConfig != nil {
		tc := tls.Client(c, tlsConfig)
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c = tc
	}
	err = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err == nil {
		_, err = c.Write(preamble[:])
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// acceptLoop serves every connection ln accepts until Close.
func (t *Transport) acceptLoop(ln net.Listener) {
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if t.isClosed() {
				return
			}
			// Out of file descriptors, say: keep the listener and retry.
			t.log.Warn("raft transport: accept failed", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if !t.track(c) {
			_ = c.Close()
			return
		}
		t.serving.Add(1)
		go func() {
			defer t.serving.Done()
			defer t.untrack(c)
			t.serve(c)
		}()
	}
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// track lists an accepted connection for Close; false once closed.
func (t *Transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.accepted == nil {
		t.accepted = make(map[net.Conn]struct{})
	}
	t.accepted[c] = struct{}{}
	return true
}

func (t *Transport) untrack(c net.Conn) {
	_ = c.Close()
	t.mu.Lock()
	delete(t.accepted, c)
	t.mu.Unlock()
}

// serve reads the frames of one accepted connection and hands them to
// dragonboat until the connection ends or a frame does not check.
func (t *Transport) serve(c net.Conn) {
	if err := t.greet(c); err != nil {
		t.refused(c, err)
		return
	}
	r := bufio.NewReaderSize(c, readBuffer)
	var hdr [headerSize]byte
	var buf []byte
	for {
		kind, payload, grown, err := readFrame(r, hdr[:], buf)
		var readAt int64
		if stagetrace.On {
			readAt = stagetrace.Now()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !t.isClosed() {
				t.log.Debug("raft transport: connection ended", "peer", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		switch kind {
		case frameBatch:
			var b pb.MessageBatch
			if err := b.Unmarshal(payload); err != nil {
				t.log.Warn("raft transport: bad message batch", "peer", c.RemoteAddr().String(), "err", err)
				return
			}
			if stagetrace.On {
				stagetrace.BatchReceived(&b, readAt)
			}
			t.onBatch(b)
		case frameChunk:
			var ch pb.Chunk
			if err := ch.Unmarshal(payload); err != nil {
				t.log.Warn("raft transport: bad snapshot chunk", "peer", c.RemoteAddr().String(), "err", err)
				return
			}
			if !t.onChunk(ch) {
				return
			}
		case frameEnd:
			s := sender{conn: c}
			_ = s.write(s.frame(0), frameEndAck, 0)
			return
		default: // frameEndAck: only a snapshot's sender reads one
			return
		}
		buf = grown
		if cap(buf) > keepBuffer {
			buf = nil
		}
	}
}

// greet completes the TLS handshake of an accepted connection, if it is
// one, and checks the preamble, each within a deadline.
func (t *Transport) greet(c net.Conn) error {
	if tc, ok := c.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
	}
	if err := c.SetReadDeadline(time.Now().Add(dialTimeout)); err != nil {
		return err
	}
	var got [len(preamble)]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return fmt.Errorf("reading the preamble: %w", err)
	}
	if !bytes.Equal(got[:], preamble[:]) {
		return fmt.Errorf("preamble %q is not baton's raft transport (is the peer started with another --raft-transport?)", got[:])
	}
	return c.SetReadDeadline(time.Time{})
}

// refused logs a connection that ended before its first frame, at most
// once every refusedEvery, and not while closing.
func (t *Transport) refused(c net.Conn, err error) {
	if t.isClosed() {
		return
	}
	now := time.Now().UnixNano()
	last := t.lastRefused.Load()
	if now-last < int64(refusedEvery) || !t.lastRefused.CompareAndSwap(last, now) {
		return
	}
	t.log.Warn("raft transport: connection refused", "peer", c.RemoteAddr().String(), "err", err)
}
