package engine

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/lni/dragonboat/v4/config"

	"github.com/baton-dev/baton/codec"
)

// Access control and TLS (protocol 1.2): the checks of Config's security
// settings, the TLS configurations they make, and the warning of a client
// port open to the network. How a connection is served under them is in
// serve.go (H) and tls.go (the TLS listener).

// RaftTLS are the PEM files of the Raft transport's mutual TLS: every node
// presents CertFile (with its KeyFile) and accepts only peers whose
// certificates CAFile signed. A node's certificate must name the host of its
// RAFT_ADDR, which is what its peers check, and allow both server and
// client authentication, since each node is both.
type RaftTLS struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

// LoadClientTLS makes the server side configuration of the TLS client
// listener from PEM files: the node's certificate and key and, when
// clientCAFile is not "", the CA whose signature every client certificate
// must bear (a client without one fails the handshake).
func LoadClientTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both --tls-cert and --tls-key")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pool, err := loadCAs(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// loadCAs reads a PEM file of one or more CA certificates.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

// validateSecurity checks the settings of access control and TLS.
func (c *Config) validateSecurity() error {
	if c.AuthSecret != nil {
		if err := codec.CheckSecret(c.AuthSecret); err != nil {
			return fmt.Errorf("--auth-file: %w", err)
		}
	}
	if c.TLSPeers != nil {
		if len(c.TLSPeers) != len(c.Peers) {
			return fmt.Errorf("--tls-peers has %d addresses, --peers %d", len(c.TLSPeers), len(c.Peers))
		}
		for _, a := range c.TLSPeers {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return fmt.Errorf("--tls-peers: bad address %q", a)
			}
		}
	}
	switch listen := c.tlsListen(); {
	case listen != "" && c.TLS == nil:
		return errors.New("--tls-listen needs --tls-cert and --tls-key")
	case listen == "" && c.TLS != nil:
		return errors.New("--tls-cert and --tls-key need --tls-listen")
	case listen != "":
		if _, port, err := net.SplitHostPort(listen); err != nil || port == "" {
			return fmt.Errorf("--tls-listen: bad address %q", listen)
		}
	}
	if c.RaftTLS != nil {
		return c.RaftTLS.check(c.self().RaftAddr)
	}
	return nil
}

// tlsListen is the address the TLS client listener binds, "" for none.
func (c *Config) tlsListen() string {
	if c.TLSListen == "" && c.TLSPeers != nil && c.Join == nil && c.ID <= uint64(len(c.TLSPeers)) {
		return c.TLSPeers[c.ID-1]
	}
	return c.TLSListen
}

// check reads the files as dragonboat will, and refuses a certificate
// that the CA did not sign, that has expired, that does not name raftAddr's
// host or that cannot serve both ends of a connection: each of these would
// only show later as peers that never connect.
func (r *RaftTLS) check(raftAddr string) error {
	missing := ""
	switch {
	case r.CAFile == "":
		missing = "--raft-tls-ca"
	case r.CertFile == "":
		missing = "--raft-tls-cert"
	case r.KeyFile == "":
		missing = "--raft-tls-key"
	}
	if missing != "" {
		return fmt.Errorf("--raft-tls-ca, --raft-tls-cert and --raft-tls-key go together: %s is missing", missing)
	}
	pool, err := loadCAs(r.CAFile)
	if err != nil {
		return fmt.Errorf("--raft-tls-ca: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(r.CertFile, r.KeyFile)
	if err != nil {
		return fmt.Errorf("--raft-tls-cert/--raft-tls-key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("--raft-tls-cert: %w", err)
	}
	chain := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if ca, err := x509.ParseCertificate(der); err == nil {
			chain.AddCert(ca)
		}
	}
	host, _, _ := net.SplitHostPort(raftAddr)
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		opts := x509.VerifyOptions{Roots: pool, Intermediates: chain, KeyUsages: []x509.ExtKeyUsage{use}}
		if use == x509.ExtKeyUsageServerAuth {
			opts.DNSName = host
		}
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("--raft-tls-cert does not fit this node (RAFT_ADDR %s) under --raft-tls-ca: %w", raftAddr, err)
		}
	}
	return nil
}

// apply switches on dragonboat's mutual TLS in nh.
func (r *RaftTLS) apply(nh *config.NodeHostConfig) {
	nh.MutualTLS = true
	nh.CAFile, nh.CertFile, nh.KeyFile = r.CAFile, r.CertFile, r.KeyFile
}

// hashSecret is what the node keeps of its secret (rightSecret); nil for
// none.
func hashSecret(secret []byte) []byte {
	if secret == nil {
		return nil
	}
	h := sha256.Sum256(secret)
	return h[:]
}

// warnIfOpen logs, at start, each client listener that other machines can
// reach and that lets anyone in: the plain one without a secret, the TLS
// one without a secret or client certificates.
func (n *Node) warnIfOpen() {
	if addr := n.ClientAddr(); !loopback(addr) && n.secretHash == nil {
		n.log.Warn("the client port is reachable from other machines, unencrypted and without a secret: "+
			"anyone who can reach it can take and release locks (see --auth-file, --tls-listen)", "client", addr)
	}
	if addr := n.cfg.tlsListen(); addr != "" && !loopback(addr) && n.secretHash == nil && n.cfg.TLS.ClientCAs == nil {
		n.log.Warn("the TLS client port is reachable from other machines without a secret or client certificates: "+
			"anyone who can reach it can take and release locks (see --auth-file, --tls-client-ca)", "tls", addr)
	}
}

// loopback reports whether a listener on addr takes connections from this
// machine only. An empty host binds every interface; a host name other
// than localhost counts as reachable, since what it resolves to may change.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
