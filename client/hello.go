package client

// Opening a session on a new connection, before any request: the TLS
// handshake (WithTLS) and the H of the shared secret (WithSecret, protocol
// 1.2).

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/baton-dev/baton/codec"
)

// WithTLS makes the client speak TLS, configured by cfg, on every
// connection (to a server's --tls-listen address). When cfg.ServerName is
// empty, the host of the address dialled is the name the server's
// certificate must carry. Set cfg.Certificates for a server that asks for
// a client certificate (--tls-client-ca).
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		o.tls = cfg
	}
}

// WithSecret makes the client open every connection, redials and
// connections to other nodes included, with "H <secret>", the shared
// secret of a server started with --auth-file. A server that refuses it
// fails the requests with an error matching ErrAuth, which is not retried.
func WithSecret(secret string) Option {
	return func(o *options) {
		o.secret = secret
	}
}

// checkSecret validates the secret of WithSecret, before anything is sent.
func checkSecret(secret string) error {
	if secret == "" {
		return nil
	}
	if err := codec.CheckSecret([]byte(secret)); err != nil {
		return argError("bad secret: %v", err)
	}
	return nil
}

// open turns a new connection to addr into a session (Open).
func (cl *Client) open(ctx context.Context, nc net.Conn, addr string, lr *codec.LineReader) (net.Conn, error) {
	return Open(ctx, nc, addr, cl.opts.tls, cl.opts.secret, lr)
}

// Open turns nc, a new connection to addr, into a session as a Client does
// with its own connections: the TLS handshake when tlsCfg is set (when its
// ServerName is empty, the host of addr is the name the server's
// certificate must carry), then "H <secret>" when secret is set, both
// bounded by ctx. It returns the connection to speak the protocol on (the
// TLS one over nc, or nc). It is for programs that speak the protocol
// themselves, such as the load generator (package bench); lr is the reader
// they go on reading the answers with. A server that refuses the secret
// makes an error matching ErrAuth. On error nc is closed.
func Open(ctx context.Context, nc net.Conn, addr string, tlsCfg *tls.Config, secret string, lr *codec.LineReader) (net.Conn, error) {
	if tlsCfg != nil {
		cfg := tlsCfg
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	if secret == "" {
		return nc, nil
	}
	if err := hello(ctx, nc, addr, secret, lr); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return nc, nil
}

// hello sends H and reads its answer.
func hello(ctx context.Context, nc net.Conn, addr, secret string, lr *codec.LineReader) error {
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
		defer nc.SetDeadline(time.Time{})
	}
	req := codec.Request{Op: codec.OpHello, Secret: []byte(secret)}
	if _, err := nc.Write(codec.AppendRequest(nil, &req)); err != nil {
		return err
	}
	for {
		line, err := lr.Next()
		if err != nil {
			return fmt.Errorf("bad answer from %s to H: %w", addr, err)
		}
		if line != nil {
			return helloAnswer(addr, line)
		}
		n, err := nc.Read(lr.Free())
		lr.Filled(n)
		if n == 0 && err != nil {
			return fmt.Errorf("no answer from %s to H: %w", addr, err)
		}
	}
}

// helloAnswer is what an answer to H means: nil for H - OK.
func helloAnswer(addr string, line []byte) error {
	var r codec.Response
	err := codec.ParseResponse(line, &r)
	switch {
	case err == nil && r.Op == codec.OpHello && r.Status == codec.StatusOK:
		return nil
	case err == nil && r.Op == codec.OpHello && r.Status == codec.StatusErr && string(r.Code) == codec.CodeAuth:
		return fmt.Errorf("%s: %w", addr, ErrAuth)
	}
	return fmt.Errorf("unexpected answer from %s to H (protocol 1.2): %q", addr, line)
}
