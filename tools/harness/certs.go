package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: its certificate and the
// certificates it issues are PEM files in the test's temporary directory,
// for batond's TLS flags, and also at hand as crypto values for clients.
type CA struct {
	// File is the CA certificate (PEM): --raft-tls-ca, --tls-client-ca,
	// baton --tls-ca.
	File string
	// Pool holds the CA certificate, for a tls.Config's RootCAs.
	Pool *x509.CertPool

	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Cert is a key pair a CA issued.
type Cert struct {
	CertFile string // PEM certificate: --raft-tls-cert, --tls-cert
	KeyFile  string // PEM private key: --raft-tls-key, --tls-key
	// TLS is the pair for a tls.Config's Certificates.
	TLS tls.Certificate
}

// NewCA makes a CA named name, valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("harness: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("harness: CA %s: %v", name, err)
	}
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.File = ca.write(name+".crt", "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for name, signed by the CA, good for both
// server and client authentication (a batond node is both to its peers)
// and naming hosts: IP addresses or DNS names; 127.0.0.1 when none.
func (ca *CA) Issue(name string, hosts ...string) Cert {
	t := ca.t
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("harness: certificate %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("harness: certificate %s: %v", name, err)
	}
	c := Cert{
		CertFile: ca.write(name+".crt", "CERTIFICATE", der),
		KeyFile:  ca.write(name+".key", "PRIVATE KEY", keyDER),
	}
	if c.TLS, err = tls.X509KeyPair(pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER)); err != nil {
		t.Fatalf("harness: certificate %s: %v", name, err)
	}
	return c
}

// RaftArgs are the batond flags that make c this node's certificate of
// the Raft transport's mutual TLS under ca.
func (ca *CA) RaftArgs(c Cert) []string {
	return []string{"--raft-tls-ca", ca.File, "--raft-tls-cert", c.CertFile, "--raft-tls-key", c.KeyFile}
}

func (ca *CA) write(name, kind string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pemBlock(kind, der), 0o600); err != nil {
		ca.t.Fatalf("harness: %v", err)
	}
	return p
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("harness: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatalf("harness: serial: %v", err)
	}
	return n
}
