package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/tools/harness"
)

// TestTLSAndSecret: the lock commands against a node that serves TLS with
// client certificates and wants a secret: --tls-ca, --tls-cert/--tls-key,
// --auth-file and $BATON_AUTH.
func TestTLSAndSecret(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-for-the-cli"
	ca, clients := harness.NewCA(t, "server-ca"), harness.NewCA(t, "client-ca")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{
		Shards: 2, Secret: secret, TLS: &harness.ServerTLS{Cert: ca.Issue("server"), ClientCA: clients.File},
	})
	authFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(authFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	me := clients.Issue("cli")
	tlsArgs := []string{"--tls-ca", ca.File, "--tls-cert", me.CertFile, "--tls-key", me.KeyFile, "--timeout", "3s"}
	run := func(env map[string]string, args ...string) (int, string, string) {
		t.Helper()
		code, out, errs := runArgs(t, env, args...)
		t.Logf("baton %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		return code, out, errs
	}
	overTLS := map[string]string{"BATON_ADDR": n.TLSAddr}

	code, out, _ := run(overTLS, append([]string{"acquire", "cli/tls", "--lease", "60s", "--auth-file", authFile}, tlsArgs...)...)
	if code != exitOK || strings.TrimSpace(out) == "" {
		t.Fatalf("acquire over TLS with --auth-file: exit %d", code)
	}
	withEnv := map[string]string{"BATON_ADDR": n.TLSAddr, "BATON_AUTH": secret}
	if code, out, _ = run(withEnv, append([]string{"query", "cli/tls"}, tlsArgs...)...); code != exitOK || !strings.Contains(out, "held by token") {
		t.Fatalf("query over TLS with $BATON_AUTH: exit %d, %q", code, out)
	}
	plain := map[string]string{"BATON_ADDR": n.ClientAddr}
	if code, out, _ = run(plain, "query", "cli/tls", "--auth-file", authFile); code != exitOK || !strings.Contains(out, "held by token") {
		t.Fatalf("query on the plain port with --auth-file: exit %d, %q", code, out)
	}

	// Refusals: a clear error, exit 1, and no waiting out --timeout.
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		says string
	}{
		{"no secret", plain, []string{"query", "cli/tls"}, "secret"},
		{"wrong secret", map[string]string{"BATON_ADDR": n.ClientAddr, "BATON_AUTH": "wrong"}, []string{"query", "cli/tls"}, "secret"},
		{"no client certificate", withEnv, []string{"query", "cli/tls", "--tls-ca", ca.File, "--timeout", "3s"}, "certificate"},
		{"server of another CA", withEnv, append([]string{"query", "cli/tls", "--tls-ca", clients.File}, tlsArgs[2:]...), "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := run(tc.env, tc.args...)
			if code != exitFailed || !strings.Contains(errs, tc.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", code, errs, exitFailed, tc.says)
			}
		})
	}
	// Flags that cannot work are caught before anything is sent.
	for _, args := range [][]string{
		{"query", "k", "--auth-file", filepath.Join(t.TempDir(), "missing")},
		{"query", "k", "--tls-cert", me.CertFile},
		{"query", "k", "--tls-ca", me.KeyFile},
	} {
		if code, _, errs := run(plain, args...); code != exitFailed || errs == "" {
			t.Errorf("%q: exit %d, stderr %q; want a failure", args, code, errs)
		}
	}
	if code, _, errs := run(map[string]string{"BATON_ADDR": n.ClientAddr, "BATON_AUTH": "two words"}, "query", "k"); code != exitFailed ||
		!strings.Contains(errs, "BATON_AUTH") {
		t.Errorf("a bad $BATON_AUTH: exit %d, stderr %q", code, errs)
	}
}

// TestAdminTLSAndSecret: status and backup against a node whose --http
// wants the secret and speaks TLS (--http-tls): they send the secret of
// --auth-file or $BATON_AUTH as a Bearer token and speak HTTPS with --tls-ca;
// without the secret, or with a wrong one, they exit 1 with a reason.
func TestAdminTLSAndSecret(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-for-the-admin"
	ca := harness.NewCA(t, "server-ca")
	n := harness.StartNode(t, harness.Bin(t), harness.Options{
		Shards: 1, Secret: secret, HTTP: true, Args: []string{"--http-tls"},
		TLS: &harness.ServerTLS{Cert: ca.Issue("server")},
	})
	authFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(authFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "node.backup")
	withSecret := map[string]string{"BATON_HTTP": n.HTTPAddr, "BATON_AUTH": secret}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		says string // in stdout on success, else in stderr
	}{
		{"status", withSecret, []string{"status", "--tls-ca", ca.File}, exitOK, "cluster version"},
		{"status with --auth-file", map[string]string{"BATON_HTTP": n.HTTPAddr},
			[]string{"status", "--tls-ca", ca.File, "--auth-file", authFile}, exitOK, "cluster version"},
		{"backup", withSecret, []string{"backup", "-o", out, "--tls-ca", ca.File}, exitOK, "1 shards"},
		{"status without the secret", map[string]string{"BATON_HTTP": n.HTTPAddr}, []string{"status", "--tls-ca", ca.File}, exitFailed, "--auth-file or BATON_AUTH"},
		{"backup with a wrong secret", map[string]string{"BATON_HTTP": n.HTTPAddr, "BATON_AUTH": "wrong"},
			[]string{"backup", "-o", out + "2", "--tls-ca", ca.File}, exitFailed, "refused the secret"},
		{"status in plain HTTP", withSecret, []string{"status"}, exitFailed, "400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tc.env, tc.args...)
			text := stdout
			if tc.code != exitOK {
				text = stderr
			}
			if code != tc.code || !strings.Contains(text, tc.says) {
				t.Fatalf("baton %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.says)
			}
		})
	}
	if _, err := os.Stat(out + "2"); !os.IsNotExist(err) {
		t.Fatalf("a refused backup left a file: %v", err)
	}
}
