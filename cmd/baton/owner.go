package main

// Owners of the lock commands' acquires: the HOST:PID: prefix of the
// random ones, and --owner.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/baton-dev/baton/client"
	"github.com/baton-dev/baton/codec"
)

// ownerPrefix is the prefix of the owners baton's acquires name: host and
// process id, so that baton query shows which machine and process holds a
// lock. The client adds 128 random bits, so that every acquire's owner is
// its own even within one process.
func ownerPrefix() string {
	host, _ := os.Hostname() // "" is handled below
	return ownerPrefixOf(host, os.Getpid())
}

// ownerPrefixOf is "HOST:PID:", with the host cut to what fits beside the
// pid in client.MaxOwnerPrefix bytes (on a character boundary) and any
// byte an owner may not hold (space, control, DEL) replaced by '_', since
// a host name is not ours to trust.
func ownerPrefixOf(host string, pid int) string {
	tail := ":" + strconv.Itoa(pid) + ":"
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(host, "_"))
	if host == "" {
		host = "unknown-host"
	}
	room := client.MaxOwnerPrefix - len(tail)
	if len(host) > room {
		host = host[:room]
		for !utf8.ValidString(host) {
			host = host[:len(host)-1]
		}
	}
	return host + tail
}

// ownerFlag is --owner: a valid owner, and whether one was given (an
// empty one is an error, not the default).
type ownerFlag struct {
	owner string
	set   bool
}

func (f *ownerFlag) String() string { return f.owner }

func (f *ownerFlag) Set(s string) error {
	if !codec.ValidOwner([]byte(s)) {
		return fmt.Errorf("bad owner %q: want 1 to %d bytes, no spaces or control characters", s, codec.MaxOwner)
	}
	f.owner, f.set = s, true
	return nil
}

// options are the acquire options --owner asks for.
func (f *ownerFlag) options() []client.AcquireOption {
	if !f.set {
		return nil
	}
	return []client.AcquireOption{client.WithOwner(f.owner)}
}
