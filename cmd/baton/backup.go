package main

// baton backup: a node's GET /backup, checked as it arrives and written to
// a file only whole, for batond --restore.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-dev/baton/backup"
)

const defaultBackupTimeout = 10 * time.Minute

const backupUsage = `baton backup: write a backup of a node's lock table to a file.

Usage:
  baton backup -o FILE [flags]

Reads /backup from a batond started with --http ADDR: every shard's locks
(keys, tokens, leases, owners) and token counter, as that node has applied
them, each shard at one point in time. Back up a leader (baton status shows
which node leads): a follower may lag it a little. A new cluster starts
from the file with batond --restore FILE, in the next restore epoch: its
tokens are above every token the backed-up cluster issues, before the
backup and after it.

The backup is checked as it arrives (its framing and every shard's
checksum) and written to a temporary file beside FILE, which is synced and
renamed to FILE only once all of it has arrived and passed: a backup cut
short or damaged on the way leaves FILE as it was. FILE is readable by its
owner only: it holds every lock's key and owner.

The secret goes to the node as "Authorization: Bearer" (a node with
--auth-file wants it), and --tls speaks HTTPS (a node with --http-tls).

Flags:
  -o, --output FILE  where to write the backup (required)
  --http ADDR        the node's --http address, host:port or an http:// URL
                     (default $BATON_HTTP, else ` + defaultHTTPAddr + `)
  --timeout DURATION how long the whole backup may take; 0 for no limit
                     (default 10m)
  --json             print what was written as one JSON object
` + securityHelp + `  --help             show this text

Exit status: 0 written; 1 the node could not be reached, refused, or sent
a bad or incomplete backup, or FILE could not be written; 2 bad usage;
130 interrupted.
`

type backupOpts struct {
	http    string
	output  string
	json    bool
	timeout time.Duration
	sec     securityOpts
}

func backupFlags(o *backupOpts, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	httpFlag(fs, &o.http, getenv)
	fs.StringVar(&o.output, "o", "", "")
	fs.StringVar(&o.output, "output", "", "")
	fs.DurationVar(&o.timeout, "timeout", defaultBackupTimeout, "")
	fs.BoolVar(&o.json, "json", false, "")
	securityFlags(fs, &o.sec, getenv)
	return fs
}

func runBackup(e env, args []string) int {
	var o backupOpts
	fs := backupFlags(&o, e.getenv)
	if _, code, done := parseCommand(e, "backup", backupUsage, fs, args, 0, 0); done {
		return code
	}
	if o.output == "" {
		return usageError(e, "backup", errors.New("-o FILE: where to write the backup"))
	}
	url, err := nodeURL(o.http, "/backup")
	if err != nil {
		return usageError(e, "backup", err)
	}
	ctx, cancel := limited(e, o.timeout)
	defer cancel()
	parts, size, err := fetchBackup(ctx, url, &o.sec, o.output)
	if err != nil {
		return failure(e, "backup", err)
	}
	locks := uint64(0)
	for _, p := range parts {
		locks += p.Locks
	}
	if o.json {
		printJSON(e.stdout, map[string]any{"file": o.output, "shards": len(parts), "locks": locks, "bytes": size})
	} else {
		fmt.Fprintf(e.stdout, "%s: %d shards, %d locks, %d bytes\n", o.output, len(parts), locks, size)
	}
	return exitOK
}

// fetchBackup GETs the node's backup at url and writes it to path
// atomically: the body goes through backup.Check into a temporary file
// beside path, which replaces path only once the whole backup has arrived
// and passed.
func fetchBackup(ctx context.Context, url string, sec *securityOpts, path string) (parts []backup.Part, size int64, err error) {
	resp, url, err := adminGet(ctx, url, sec)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if parts, err = backup.Check(io.TeeReader(resp.Body, tmp)); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", url, err)
	}
	if size, err = tmp.Seek(0, io.SeekCurrent); err != nil {
		return nil, 0, err
	}
	if err = tmp.Sync(); err != nil {
		return nil, 0, err
	}
	if err = tmp.Close(); err != nil {
		return nil, 0, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return nil, 0, err
	}
	// The rename is durable once the directory is.
	return parts, size, syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
