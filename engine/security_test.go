package engine

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"strings"
	"testing"

	"github.com/baton-dev/baton/tools/harness"
)

func TestValidateSecurity(t *testing.T) {
	ca, other := harness.NewCA(t, "ca"), harness.NewCA(t, "other")
	good := ca.Issue("node")                 // names 127.0.0.1
	elsewhere := ca.Issue("far", "10.9.9.9") // names another host
	foreign := other.Issue("stranger")
	peers := []Peer{{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}, {RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"}}
	tlsCfg := &tls.Config{}
	for _, tc := range []struct {
		name string
		cfg  func(c *Config)
		err  string // "" for none; else a part of the message
	}{
		{"nothing", func(*Config) {}, ""},
		{"raft TLS", func(c *Config) { c.RaftTLS = &RaftTLS{ca.File, good.CertFile, good.KeyFile} }, ""},
		{"raft TLS without CA", func(c *Config) { c.RaftTLS = &RaftTLS{"", good.CertFile, good.KeyFile} }, "--raft-tls-ca is missing"},
		{"raft TLS without cert", func(c *Config) { c.RaftTLS = &RaftTLS{ca.File, "", good.KeyFile} }, "--raft-tls-cert is missing"},
		{"raft TLS without key", func(c *Config) { c.RaftTLS = &RaftTLS{ca.File, good.CertFile, ""} }, "--raft-tls-key is missing"},
		{"raft TLS, key of another cert", func(c *Config) { c.RaftTLS = &RaftTLS{ca.File, good.CertFile, foreign.KeyFile} }, "--raft-tls-key"},
		{"raft TLS, cert of another CA", func(c *Config) { c.RaftTLS = &RaftTLS{ca.File, foreign.CertFile, foreign.KeyFile} }, "does not fit"},
		{"raft TLS, cert of another host", func(c *Config) { c.RaftTLS = &RaftTLS{ca.File, elsewhere.CertFile, elsewhere.KeyFile} }, "127.0.0.1"},
		{"raft TLS, CA file not PEM", func(c *Config) { c.RaftTLS = &RaftTLS{good.KeyFile, good.CertFile, good.KeyFile} }, "no PEM certificate"},
		{"client TLS", func(c *Config) { c.TLSListen, c.TLS = "127.0.0.1:5", tlsCfg }, ""},
		{"client TLS from --tls-peers", func(c *Config) { c.TLSPeers, c.TLS = []string{"127.0.0.1:5", "127.0.0.1:6"}, tlsCfg }, ""},
		{"--tls-listen without cert", func(c *Config) { c.TLSListen = "127.0.0.1:5" }, "--tls-cert"},
		{"cert without --tls-listen", func(c *Config) { c.TLS = tlsCfg }, "--tls-listen"},
		{"--tls-peers too short", func(c *Config) { c.TLSPeers, c.TLS = []string{"127.0.0.1:5"}, tlsCfg }, "--tls-peers has 1"},
		{"--tls-peers malformed", func(c *Config) { c.TLSPeers, c.TLS = []string{"127.0.0.1:5", "x"}, tlsCfg }, "bad address"},
		{"secret", func(c *Config) { c.AuthSecret = []byte("s3cret") }, ""},
		{"secret with a space", func(c *Config) { c.AuthSecret = []byte("s3 cret") }, "--auth-file"},
		{"empty secret", func(c *Config) { c.AuthSecret = []byte{} }, "--auth-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{ID: 1, Peers: peers, DataDir: "d", Limits: DefaultLimits()}
			tc.cfg(&c)
			err := c.validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			}
		})
	}
}

func TestLoadClientTLS(t *testing.T) {
	ca := harness.NewCA(t, "ca")
	cert := ca.Issue("node")
	cfg, err := LoadClientTLS(cert.CertFile, cert.KeyFile, "")
	if err != nil || cfg.ClientAuth != tls.NoClientCert || len(cfg.Certificates) != 1 {
		t.Fatalf("without client CA: %+v, %v", cfg, err)
	}
	cfg, err = LoadClientTLS(cert.CertFile, cert.KeyFile, ca.File)
	if err != nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil {
		t.Fatalf("with client CA: %+v, %v", cfg, err)
	}
	for _, args := range [][3]string{
		{cert.CertFile, "", ""}, {"", cert.KeyFile, ""}, {"", "", ca.File},
		{cert.CertFile, cert.CertFile, ""}, {cert.CertFile, cert.KeyFile, cert.KeyFile}, {"/nonexistent", cert.KeyFile, ""},
	} {
		if _, err := LoadClientTLS(args[0], args[1], args[2]); err == nil {
			t.Errorf("LoadClientTLS%q: no error", args)
		}
	}
}

func TestWarnIfOpen(t *testing.T) {
	withCA := &tls.Config{ClientCAs: x509.NewCertPool()}
	for _, tc := range []struct {
		name   string
		client string
		secret bool
		tls    string // TLS listener, "" for none
		tlsCfg *tls.Config
		warns  []string // parts of the log, one per warning; none: nothing logged
	}{
		{"loopback", "127.0.0.1:7700", false, "", nil, nil},
		{"every interface", "0.0.0.0:7700", false, "", nil, []string{"client=0.0.0.0:7700"}},
		{"every interface, with a secret", "0.0.0.0:7700", true, "", nil, nil},
		{"TLS elsewhere does not cover the plain port", "10.0.0.1:7700", false, "127.0.0.1:7743", &tls.Config{}, []string{"client=10.0.0.1:7700"}},
		{"TLS open to anyone", "127.0.0.1:7700", false, ":7743", &tls.Config{}, []string{"tls=:7743"}},
		{"TLS with client certificates", "127.0.0.1:7700", false, ":7743", withCA, nil},
		{"TLS with a secret", "127.0.0.1:7700", true, ":7743", &tls.Config{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			n := &Node{
				cfg: Config{ID: 1, Peers: []Peer{{RaftAddr: "127.0.0.1:7701", ClientAddr: tc.client}}, TLSListen: tc.tls, TLS: tc.tlsCfg},
				log: slog.New(slog.NewTextHandler(&out, nil)),
			}
			if tc.secret {
				n.secretHash = hashSecret([]byte("s"))
			}
			n.warnIfOpen()
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(tc.warns) == 0 && out.Len() > 0 || len(tc.warns) > 0 && len(lines) != len(tc.warns) {
				t.Fatalf("logged:\n%s\nwant %d warnings", out.String(), len(tc.warns))
			}
			for i, w := range tc.warns {
				if !strings.Contains(lines[i], "level=WARN") || !strings.Contains(lines[i], w) {
					t.Errorf("line %q, want a warning with %q", lines[i], w)
				}
			}
		})
	}
}
