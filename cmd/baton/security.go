package main

// The access control and TLS flags of the lock commands and of bench
// (protocol 1.2): --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name,
// --auth-file, and $BATON_AUTH; what they make of the client.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/codec"
)

// securityOpts are the flags of securityFlags.
type securityOpts struct {
	tls        bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	authFile   string
	envSecret  string // $BATON_AUTH
}

// securityFlags defines the flags of securityOpts on fs.
func securityFlags(fs *flag.FlagSet, o *securityOpts, getenv func(string) string) {
	fs.BoolVar(&o.tls, "tls", false, "")
	fs.StringVar(&o.caFile, "tls-ca", "", "")
	fs.StringVar(&o.certFile, "tls-cert", "", "")
	fs.StringVar(&o.keyFile, "tls-key", "", "")
	fs.StringVar(&o.serverName, "tls-server-name", "", "")
	fs.StringVar(&o.authFile, "auth-file", "", "")
	o.envSecret = getenv("BATON_AUTH")
}

// securityHelp explains the flags of securityFlags, for the usage texts.
const securityHelp = `  --tls              speak TLS (to a server's --tls-listen address), checking
                     its certificate against the system's CAs; implied by
                     the other --tls flags
  --tls-ca FILE      check the server's certificate against the CA(s) in
                     FILE (PEM) instead
  --tls-cert FILE, --tls-key FILE
                     present this client certificate (PEM), for a server
                     started with --tls-client-ca
  --tls-server-name NAME
                     the name the server's certificate must carry (default:
                     the host of the address dialled)
  --auth-file FILE   open every connection with the shared secret in FILE
                     (a trailing newline is not part of it), for a server
                     started with --auth-file (default $BATON_AUTH, the
                     secret itself)
`

// clientOptions turns the flags into the client's options.
func (o *securityOpts) clientOptions() ([]client.Option, error) {
	var opts []client.Option
	secret, err := o.secret()
	if err != nil {
		return nil, err
	}
	if secret != "" {
		opts = append(opts, client.WithSecret(secret))
	}
	cfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, client.WithTLS(cfg))
	}
	return opts, nil
}

// secret is the shared secret of --auth-file, else of $BATON_AUTH; "" for
// none.
func (o *securityOpts) secret() (string, error) {
	switch {
	case o.authFile != "":
		data, err := os.ReadFile(o.authFile)
		if err != nil {
			return "", fmt.Errorf("--auth-file: %w", err)
		}
		secret, err := codec.ParseSecret(data)
		if err != nil {
			return "", fmt.Errorf("--auth-file %s: %w", o.authFile, err)
		}
		return string(secret), nil
	case o.envSecret != "":
		if err := codec.CheckSecret([]byte(o.envSecret)); err != nil {
			return "", fmt.Errorf("$BATON_AUTH: %w", err)
		}
		return o.envSecret, nil
	}
	return "", nil
}

// tlsConfig is the client's TLS configuration, nil for none.
func (o *securityOpts) tlsConfig() (*tls.Config, error) {
	if !o.tls && o.caFile == "" && o.certFile == "" && o.keyFile == "" && o.serverName == "" {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: o.serverName, MinVersion: tls.VersionTLS12}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", o.caFile)
		}
	}
	if o.certFile != "" || o.keyFile != "" {
		if o.certFile == "" || o.keyFile == "" {
			return nil, errors.New("--tls-cert and --tls-key go together")
		}
		pair, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
