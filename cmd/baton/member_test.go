package main

// Tests of baton member against a scripted server (owner_test.go's): the
// request lines it sends, what it prints, and how it fails. Tests against
// real batond processes come with the server's side of membership.

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

// memberServer answers H with OK, M with answer(line), and anything else
// (there should be nothing else) with ERR badrequest.
func memberServer(t *testing.T, answer func(line string) string) *scriptedServer {
	return startScripted(t, func(line string) string {
		switch {
		case strings.HasPrefix(line, "H "):
			return "H - OK"
		case strings.HasPrefix(line, "M - "):
			return answer(line)
		}
		return "? - ERR badrequest unexpected " + line
	})
}

// answerAll answers every M with the same line.
func answerAll(answer string) func(string) string {
	return func(string) string { return answer }
}

// member runs baton member args against s with the extra environment env.
func member(t *testing.T, s *scriptedServer, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	vars := map[string]string{"BATON_ADDR": s.addr()}
	for k, v := range env {
		vars[k] = v
	}
	return runArgs(t, vars, append([]string{"member"}, args...)...)
}

const twoMembers = "M - OK 2/voter/10.0.0.2:7701/10.0.0.2:7700/- 1/voter/10.0.0.1:7701/10.0.0.1:7700/10.0.0.1:7443 4/learner/10.0.0.4:7701/10.0.0.4:7700/-"

func TestMemberList(t *testing.T) {
	s := memberServer(t, answerAll(twoMembers))
	code, out, errs := member(t, s, nil, "list")
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	want := []string{
		"ID  ROLE     RAFT           CLIENT         TLS",
		"2   voter    10.0.0.2:7701  10.0.0.2:7700  -",
		"1   voter    10.0.0.1:7701  10.0.0.1:7700  10.0.0.1:7443",
		"4   learner  10.0.0.4:7701  10.0.0.4:7700  -",
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, want) {
		t.Fatalf("list:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}

	code, out, errs = member(t, s, nil, "list", "--json")
	if code != exitOK || errs != "" {
		t.Fatalf("--json: exit %d, stderr %q", code, errs)
	}
	const wantJSON = `{"members":[{"id":2,"raft":"10.0.0.2:7701","client":"10.0.0.2:7700","role":"voter"},` +
		`{"id":1,"raft":"10.0.0.1:7701","client":"10.0.0.1:7700","role":"voter","tls":"10.0.0.1:7443"},` +
		`{"id":4,"raft":"10.0.0.4:7701","client":"10.0.0.4:7700","role":"learner"}]}` + "\n"
	if out != wantJSON {
		t.Fatalf("--json:\n%s\nwant:\n%s", out, wantJSON)
	}
	if got := s.got(); !slices.Equal(got, []string{"M - LIST", "M - LIST"}) {
		t.Fatalf("requests %q", got)
	}
}

func TestMemberChanges(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		line   string // the request
		answer string
		out    string // stdout
	}{
		{[]string{"add", "10.0.0.5:7701/10.0.0.5:7700"}, "M - ADD 10.0.0.5:7701/10.0.0.5:7700", "M - OK 5",
			"added member 5, a learner until it has caught up; start it with:\n  batond --id 5 --join 10.0.0.5:7701/10.0.0.5:7700 --data DIR\n"},
		{[]string{"add", "--json", "10.0.0.5:7701/10.0.0.5:7700"}, "M - ADD 10.0.0.5:7701/10.0.0.5:7700", "M - OK 5",
			`{"client":"10.0.0.5:7700","command":"batond --id 5 --join 10.0.0.5:7701/10.0.0.5:7700 --data DIR","id":5,"raft":"10.0.0.5:7701","role":"learner"}` + "\n"},
		{[]string{"add", "h6:7701/h6:7700", "--tls-listen", "h6:7443", "--json"}, "M - ADD h6:7701/h6:7700/h6:7443", "M - OK 6",
			`{"client":"h6:7700","command":"batond --id 6 --join h6:7701/h6:7700 --data DIR --tls-listen h6:7443 --tls-cert FILE --tls-key FILE","id":6,"raft":"h6:7701","role":"learner","tls":"h6:7443"}` + "\n"},
		{[]string{"remove", "3"}, "M - REMOVE 3", "M - OK", "removed member 3\n"},
		{[]string{"remove", "--force", "3", "--json"}, "M - REMOVE 3 FORCE", "M - OK", `{"id":3,"removed":true}` + "\n"},
		{[]string{"priority", "2,1,4"}, "M - PRIORITY 2,1,4", "M - OK", "priority order: 2,1,4\n"},
		{[]string{"priority", "2,1,4", "--json"}, "M - PRIORITY 2,1,4", "M - OK", `{"priority":[2,1,4]}` + "\n"},
	} {
		s := memberServer(t, answerAll(tc.answer))
		code, out, errs := member(t, s, nil, tc.args...)
		if code != exitOK || errs != "" || out != tc.out {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0, %q", tc.args, code, out, errs, tc.out)
		}
		if got := s.got(); !slices.Equal(got, []string{tc.line}) {
			t.Errorf("%v: requests %q, want %q", tc.args, got, tc.line)
		}
	}
	// add --json is an object with the id.
	s := memberServer(t, answerAll("M - OK 7"))
	_, out, _ := member(t, s, nil, "add", "a:1/b:2", "--json")
	var v struct{ ID uint64 }
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.ID != 7 {
		t.Fatalf("add --json %q: %v", out, err)
	}
}

// TestMemberFailures: a refusal, an old server, a lost answer, no leader
// for --timeout: exit 1 and one line on stderr that says why.
func TestMemberFailures(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		answer func(string) string
		says   []string
	}{
		{[]string{"remove", "2"}, answerAll("M - ERR refused the voters left would have no live majority (1 of 2 live); --force skips this check"),
			[]string{"baton member remove: refused: the voters left would have no live majority (1 of 2 live); --force skips this check"}},
		{[]string{"add", "a:1/b:2"}, answerAll("M - ERR refused another membership change is under way: retry"),
			[]string{"refused: another membership change is under way: retry"}},
		{[]string{"list"}, answerAll("? - ERR badrequest op must be A, R, K, Q or H"),
			[]string{"baton member list:", "protocol 1.3"}},
		{[]string{"priority", "1,2"}, answerAll("M - ERR badrequest priority must name every voter once"),
			[]string{"baton member priority:", "badrequest", "priority must name every voter once"}},
		{[]string{"list", "--timeout", "300ms"}, answerAll("M - ERR unavailable no leader right now"),
			[]string{"baton member list:", "no leader right now", "see --timeout"}},
		{[]string{"list"}, answerAll("M - OK 1/voter/a:1"),
			[]string{"baton member list:", "bad member"}},
	} {
		s := memberServer(t, tc.answer)
		code, out, errs := member(t, s, nil, tc.args...)
		if code != exitFailed || out != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1 and one line", tc.args, code, out, errs)
			continue
		}
		for _, w := range tc.says {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr %q does not say %q", tc.args, errs, w)
			}
		}
	}
}

// TestMemberSecretAndMoved: the secret opens the connection, and MOVED
// sends the request to the member that coordinates changes.
func TestMemberSecretAndMoved(t *testing.T) {
	coordinator := memberServer(t, answerAll("M - OK"))
	s := memberServer(t, answerAll("M - MOVED "+coordinator.addr()))
	code, _, errs := member(t, s, map[string]string{"BATON_AUTH": "s3cret"}, "remove", "4")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, srv := range []*scriptedServer{s, coordinator} {
		if got := srv.got(); len(got) < 2 || got[0] != "H s3cret" || !slices.Contains(got, "M - REMOVE 4") {
			t.Errorf("requests %q: want H s3cret first, then M - REMOVE 4", got)
		}
	}
}

func TestMemberBadUsage(t *testing.T) {
	s := memberServer(t, answerAll("M - OK"))
	for _, args := range [][]string{
		{},
		{"frob"},
		{"list", "extra"},
		{"list", "--force"},
		{"add"},
		{"add", "a:1"},
		{"add", "a:1/b:2/c:3"},
		{"add", "a:1/b:x"},
		{"add", "a:1/:2"},
		{"add", "a:1/b:0"},
		{"add", "a:1/b:2", "--tls-listen", "nope"},
		{"add", "a:1/b:2", "c:3/d:4"},
		{"remove"},
		{"remove", "x"},
		{"remove", "0"},
		{"remove", "-1"},
		{"remove", "1", "2"},
		{"remove", "1", "--tls-listen", "a:1"},
		{"priority"},
		{"priority", "1,,2"},
		{"priority", "1,2,1"},
		{"priority", "1 2"},
		{"priority", "1", "--force"},
		{"list", "--addr", ","},
	} {
		code, out, errs := member(t, s, nil, args...)
		if code != exitBadUsage || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "baton member") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errs)
		}
	}
	if got := s.got(); len(got) != 0 {
		t.Fatalf("bad usage sent %q", got)
	}
}

func TestMemberHelp(t *testing.T) {
	for _, args := range [][]string{{"member", "--help"}, {"member", "help"}, {"help", "member"}, {"member", "add", "--help"}, {"member", "list", "-h"}} {
		code, out, errs := runArgs(t, nil, args...)
		if code != exitOK || errs != "" || !strings.Contains(out, "baton member remove ID") {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		for _, sub := range []string{"list", "add", "remove", "priority"} {
			var o memberOpts
			memberFlags(sub, &o, os.Getenv).VisitAll(func(f *flag.Flag) {
				if !strings.Contains(out, "--"+f.Name+" ") {
					t.Errorf("%v does not explain --%s of %s", args, f.Name, sub)
				}
			})
		}
	}
	if code, out, _ := runArgs(t, nil, "--help"); code != exitOK || !strings.Contains(out, "member ") {
		t.Fatalf("baton --help does not list member")
	}
	var o memberOpts
	fs := memberFlags("list", &o, os.Getenv)
	if o.timeout.String() != "30s" || fs.Lookup("timeout").DefValue != "30s" {
		t.Fatalf("member --timeout defaults to %v", o.timeout)
	}
}
