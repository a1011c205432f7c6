package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/backup"
	"github.com/baton-dev/baton/tools/harness"
)

// TestBackup writes a live node's backup with baton backup, and starts a
// new node from it with batond --restore.
func TestBackup(t *testing.T) {
	n := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, HTTP: true})
	c := harness.Dial(t, n.ClientAddr)
	c.Send("A backup/k 600000 0 me")
	line, err := c.ReadLine(5 * time.Second)
	if err != nil || !strings.HasPrefix(line, "A backup/k OK ") {
		t.Fatalf("acquire: %q, %v", line, err)
	}
	token := strings.TrimPrefix(line, "A backup/k OK ")

	file := filepath.Join(t.TempDir(), "baton.backup")
	code, out, errs := runArgs(t, nil, "backup", "--http", n.HTTPAddr, "-o", file)
	if code != exitOK || errs != "" {
		t.Fatalf("baton backup: exit %d, stderr %q", code, errs)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("the backup's mode is %v, want 0600", fi.Mode().Perm())
	}
	if want := fmt.Sprintf("%s: 2 shards, 1 locks, %d bytes\n", file, len(data)); out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	// The file is the node's /backup as served.
	resp, err := http.Get("http://" + n.HTTPAddr + "/backup")
	if err != nil {
		t.Fatal(err)
	}
	served, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(served, data) {
		t.Fatalf("the file (%d bytes) is not /backup (%d bytes, %v)", len(data), len(served), err)
	}

	// --json, and BATON_HTTP for --http; the file is replaced.
	code, out, errs = runArgs(t, map[string]string{"BATON_HTTP": n.HTTPAddr}, "backup", "--output", file, "--json")
	type written struct {
		File                 string
		Shards, Locks, Bytes int
	}
	var doc written
	if err := json.Unmarshal([]byte(out), &doc); code != exitOK || errs != "" || err != nil || doc != (written{file, 2, 1, len(data)}) {
		t.Fatalf("baton backup --json: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Errorf("%d files beside the backup, want none", len(entries)-1)
	}

	restored := harness.StartNode(t, harness.Bin(t), harness.Options{Shards: 2, Args: []string{"--restore", file}})
	got := harness.Dial(t, restored.ClientAddr).Do(t, "Q backup/k")
	if !regexp.MustCompile(`^Q backup/k HELD ` + token + ` [0-9]+ me$`).MatchString(got) {
		t.Fatalf("restored node: %q, want backup/k held with token %s by me", got, token)
	}
}

// testBackupFile is a well-formed backup file of two shards (what is in
// the parts is batond's business, not baton backup's).
func testBackupFile(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := backup.NewWriter(&buf, 2)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		part := bytes.Repeat([]byte{byte(id)}, 3000)
		if err := w.Part(backup.Part{Shard: id, Locks: 1, Length: uint64(len(part))}, func(w io.Writer) error {
			_, err := w.Write(part)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestBackupFailures: a node that refuses, is not there, or sends a
// damaged or cut backup is a failure in one line that leaves the file as
// it was and nothing beside it; bad usage is exit 2.
func TestBackupFailures(t *testing.T) {
	good := testBackupFile(t)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	serve := func(status int, body []byte) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/backup" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	dead := harness.FreeAddr(t) // nothing listens there
	dir := t.TempDir()
	file := filepath.Join(dir, "kept")
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"cut", []string{"--http", serve(200, good[:len(good)-10])}, exitFailed, "bad backup: truncated in shard 2"},
		{"damaged", []string{"--http", serve(200, flipped)}, exitFailed, "checksum mismatch"},
		{"not a backup", []string{"--http", serve(200, []byte("<html>hello</html>"))}, exitFailed, "not a baton backup"},
		{"refused", []string{"--http", serve(503, []byte("a backup of this node is being taken already\n"))}, exitFailed,
			"503 Service Unavailable: a backup of this node is being taken already"},
		{"old node", []string{"--http", serve(404, nil)}, exitFailed, "no /backup here"},
		{"no node", []string{"--http", dead, "--timeout", "2s"}, exitFailed, "connection refused"},
		{"no -o", []string{"--http", dead}, exitBadUsage, "-o FILE"},
		{"extra argument", []string{"--http", dead, "extra"}, exitBadUsage, `unexpected argument "extra"`},
		{"no address", []string{"--http", " "}, exitBadUsage, "--http: no address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(file, []byte("the last good backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"backup"}, c.args...)
			if c.name != "no -o" {
				args = append(args, "-o", file)
			}
			code, out, errs := runArgs(t, nil, args...)
			if code != c.code || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and one line with %q", code, out, errs, c.code, c.want)
			}
			if kept, _ := os.ReadFile(file); string(kept) != "the last good backup" {
				t.Fatalf("a failed backup changed the file: %.40q", kept)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Fatalf("%d files left beside the backup", len(entries)-1)
			}
		})
	}
	// A directory that does not exist.
	code, _, errs := runArgs(t, nil, "backup", "--http", serve(200, good), "-o", filepath.Join(dir, "none", "file"))
	if code != exitFailed || !strings.Contains(errs, "no such file") {
		t.Fatalf("into a missing directory: exit %d, %q", code, errs)
	}
}

func TestBackupHelp(t *testing.T) {
	code, out, _ := runArgs(t, nil, "backup", "--help")
	if code != exitOK || !strings.Contains(out, "Exit status") || !strings.Contains(out, "batond --restore") {
		t.Fatalf("backup --help: exit %d\n%s", code, out)
	}
	backupFlags(&backupOpts{}, func(string) string { return "" }).VisitAll(func(f *flag.Flag) {
		name := "--" + f.Name + " "
		if len(f.Name) == 1 {
			name = "-" + f.Name + ", " // -o, --output FILE
		}
		if !strings.Contains(out, name) {
			t.Errorf("backup --help does not explain %q", name)
		}
	})
	if _, out, _ := runArgs(t, nil, "--help"); !strings.Contains(out, "  backup ") {
		t.Errorf("baton --help does not list backup:\n%s", out)
	}
}
