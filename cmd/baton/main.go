// Command baton is the command-line client of the baton lock service.
//
// It is a dispatcher of subcommands: acquire, release, extend, query and
// lock talk to a cluster through package client, and so does member, which
// changes its membership; status prints a node's /status and backup writes
// its /backup to a file; bench is the load generator (package bench). See
// baton --help.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Exit statuses.
const (
	exitOK       = 0
	exitFailed   = 1 // the command ran and failed, or could not start
	exitBadUsage = 2 // a flag or argument is wrong
	// exitInterrupted follows the shell's 128+SIGINT.
	exitInterrupted = 130
)

// env is what a subcommand may use of the outside world; tests pass their
// own.
type env struct {
	ctx    context.Context // cancelled on the first SIGINT or SIGTERM
	stdin  io.Reader       // nil: none
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// takeSignals, when not nil, sends every SIGINT and SIGTERM to fn
	// instead of cancelling ctx (and exiting on the second), until restore
	// is called: baton lock passes them on to its command.
	takeSignals func(fn func(os.Signal)) (restore func())
}

// command is one subcommand. run gets the arguments after the name.
type command struct {
	name    string
	summary string
	run     func(e env, args []string) int
}

// commands lists the subcommands in the order --help shows them.
var commands = []command{
	{"acquire", "acquire a lock and print its fencing token", runAcquire},
	{"release", "release a lock", runRelease},
	{"extend", "extend the lease of a held lock", runExtend},
	{"query", "show who holds a key: token, owner, lease left", runQuery},
	{"watch", "print who holds a key, then every change, until interrupted", runWatch},
	{"lock", "run a command while holding a lock", runLock},
	{"elect", "run a command while this candidate leads (leader election)", runElect},
	{"status", "show a node's view of itself and its cluster (its --http)", runStatus},
	{"backup", "write a backup of a node's lock table to a file (batond --restore)", runBackup},
	{"member", "list, add, remove and reorder the cluster's members", runMember},
	{"bench", "drive load against a server and measure it", runBench},
}

const usage = `baton: command-line client of the baton distributed lock service.

Usage:
  baton <command> [flags]
  baton <command> --help     flags of one command

Commands:
%s
Environment:
  BATON_ADDR   default server address(es) for --addr, comma-separated
               (otherwise 127.0.0.1:7700)
  BATON_AUTH   the shared secret of a server started with --auth-file,
               unless --auth-file names a file holding it
  BATON_HTTP   default node HTTP address for status and backup --http
               (otherwise 127.0.0.1:7780)

TLS and the secret (protocol 1.2): the lock commands, member and bench take
--tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name and --auth-file
(see their --help).

Exit status: 0 success, 1 failure, 2 bad usage, 130 interrupted; some
commands add their own (see their --help).
`

func usageText() string {
	var list string
	for _, c := range commands {
		list += fmt.Sprintf("  %-10s %s\n", c.name, c.summary)
	}
	return fmt.Sprintf(usage, list)
}

func main() {
	raiseFileLimit()
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var (
		mu      sync.Mutex
		handler func(os.Signal)
	)
	take := func(fn func(os.Signal)) func() {
		mu.Lock()
		handler = fn
		mu.Unlock()
		return func() {
			mu.Lock()
			handler = nil
			mu.Unlock()
		}
	}
	go func() {
		// By default the first signal asks the command to wind down (a
		// bench still releases its locks and prints what it measured); a
		// second one means now. A command that took the signals gets them
		// all instead.
		first := true
		for s := range sig {
			mu.Lock()
			h := handler
			mu.Unlock()
			switch {
			case h != nil:
				h(s)
			case first:
				first = false
				cancel()
			default:
				fmt.Fprintln(os.Stderr, "baton: interrupted")
				os.Exit(exitInterrupted)
			}
		}
	}()
	e := env{ctx: ctx, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, takeSignals: take}
	os.Exit(run(e, os.Args[1:]))
}

func run(e env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usageText())
		return exitBadUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			// "baton help bench" is "baton bench --help".
			return run(e, []string{args[1], "--help"})
		}
		fmt.Fprint(e.stdout, usageText())
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "baton: unknown command %q (see baton --help)\n", name)
	return exitBadUsage
}
