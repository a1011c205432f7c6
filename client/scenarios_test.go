package client

// The shared client scenarios (../testdata/clients/scenarios, described in
// ../testdata/clients/README.md): behaviour every official client must
// show, written once as data and run by each client's test suite. This is
// the Go runner: each scenario's fake servers are fakeServers (fake_test.go)
// answering by the scenario's rules, and its steps map onto the Client's
// calls. A file this runner cannot read, a step or a field it does not know,
// fails the test: a scenario written for another client runs here too, or
// fails.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

const scenarioDir = "../testdata/clients/scenarios"

type scenario struct {
	Format  int                       `json:"format"`
	Name    string                    `json:"name"`
	Checks  string                    `json:"checks"`
	Servers map[string]scenarioServer `json:"servers"`
	Client  scenarioClient            `json:"client"`
	Steps   []scenarioStep            `json:"steps"`
}

type scenarioServer struct {
	Rules []scenarioRule `json:"rules"`
}

type scenarioRule struct {
	Match string   `json:"match"`
	Reply []string `json:"reply"`
	Then  string   `json:"then"`
	Times int      `json:"times"`
	After string   `json:"after"`
}

type scenarioClient struct {
	Addresses   []string           `json:"addresses"`
	Secret      string             `json:"secret"`
	OwnerPrefix string             `json:"owner_prefix"`
	Timing      map[string]float64 `json:"timing"`
}

type scenarioStep struct {
	// call
	Call        string          `json:"call"`
	Key         string          `json:"key"`
	Lease       float64         `json:"lease"`
	Permits     int             `json:"permits"`
	Wait        *float64        `json:"wait"`
	Owner       string          `json:"owner"`
	Lock        string          `json:"lock"`
	ID          string          `json:"id"`
	Background  bool            `json:"background"`
	Expect      *scenarioExpect `json:"expect"`
	Within      float64         `json:"within"`
	TookAtLeast float64         `json:"took_at_least"`
	// join, give_up
	Join   string `json:"join"`
	GiveUp string `json:"give_up"`
	// wait_for
	WaitFor *scenarioCond `json:"wait_for"`
	// server actions
	Server         string   `json:"server"`
	Do             string   `json:"do"`
	OnConnectionOf string   `json:"on_connection_of"`
	Lines          []string `json:"lines"`
	// checks of what the servers received
	ExpectReceived   *scenarioReceived `json:"expect_received"`
	ExpectFirstLines *scenarioReceived `json:"expect_first_lines"`
}

type scenarioExpect struct {
	Value json.RawMessage `json:"value"`
	Token *uint64         `json:"token"`
	Owner *string         `json:"owner"`
	Error string          `json:"error"`
	Code  string          `json:"code"`
}

type scenarioCond struct {
	Server          string   `json:"server"`
	Servers         []string `json:"servers"`
	Received        string   `json:"received"`
	After           string   `json:"after"`
	Count           int      `json:"count"`
	OpenConnections *int     `json:"open_connections"`
	Accepted        int      `json:"accepted"`
	Heartbeats      int      `json:"heartbeats"`
	Lock            string   `json:"lock"`
	Lost            *bool    `json:"lost"`
}

type scenarioReceived struct {
	Server      string   `json:"server"`
	Servers     []string `json:"servers"`
	Match       string   `json:"match"`
	Count       *int     `json:"count"`
	AtLeast     int      `json:"at_least"`
	Connections int      `json:"connections"`
}

// loadScenario reads one file strictly: unknown fields are errors.
func loadScenario(path string) (*scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sc scenario
	if err := dec.Decode(&sc); err != nil {
		return nil, err
	}
	if sc.Format != 1 {
		return nil, fmt.Errorf("format %d: this runner reads format 1", sc.Format)
	}
	if want := strings.TrimSuffix(filepath.Base(path), ".json"); sc.Name != want {
		return nil, fmt.Errorf("name %q, want the file's name %q", sc.Name, want)
	}
	if sc.Checks == "" || len(sc.Servers) == 0 || len(sc.Client.Addresses) == 0 || len(sc.Steps) == 0 {
		return nil, errors.New("checks, servers, client.addresses and steps are required")
	}
	return &sc, nil
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario in %s: %v", scenarioDir, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := loadScenario(f)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			runScenario(t, sc)
		})
	}
}

// received is one request line a scenario server got (heartbeats excepted).
type received struct {
	seq  int // its place among the requests of every server of the run
	conn int // the connection's number on its server, from 1 in accept order
	nc   net.Conn
	text string
}

// scServer is one fake server of a scenario: a fakeServer (replaced by a
// new one at the same address when the scenario stops and starts it)
// answering by the rules.
type scServer struct {
	r    *scRun
	name string
	addr string

	mu       sync.Mutex
	fake     *fakeServer
	old      []*fakeServer // stopped ones, for the counts
	lines    []received
	connNo   map[net.Conn]int
	firsts   map[net.Conn]string
	nextConn int
	used     []int // per rule: requests it applied to
}

// scRun is one run of a scenario.
type scRun struct {
	t       *testing.T
	sc      *scenario
	servers map[string]*scServer
	cl      *Client

	mu         sync.Mutex
	vars       map[string]string
	unexpected []string
	seq        int // requests received so far, all servers together
	calls      map[string]*scCall
	locks      map[string]*Lock
}

// scCall is a call of the client under way or done.
type scCall struct {
	cancel context.CancelFunc
	done   chan struct{}
	start  time.Time
	took   time.Duration
	value  any
	err    error
}

func runScenario(t *testing.T, sc *scenario) {
	r := &scRun{t: t, sc: sc, servers: make(map[string]*scServer), vars: make(map[string]string),
		calls: make(map[string]*scCall), locks: make(map[string]*Lock)}
	for name, def := range sc.Servers {
		for i, rule := range def.Rules {
			if rule.Match == "" || (rule.Then != "" && rule.Then != "cut" && rule.Then != "freeze") || rule.Times < 0 {
				t.Fatalf("server %s, rule %d: bad rule %+v", name, i, rule)
			}
		}
		s := &scServer{r: r, name: name, connNo: make(map[net.Conn]int), firsts: make(map[net.Conn]string),
			used: make([]int, len(def.Rules))}
		s.start(t, "127.0.0.1:0")
		s.addr = s.fake.addr()
		r.servers[name] = s
	}
	var addrs []string
	for _, a := range sc.Client.Addresses {
		addrs = append(addrs, r.server(a).addr)
	}
	opts := []Option{}
	if sc.Client.Secret != "" {
		opts = append(opts, WithSecret(sc.Client.Secret))
	}
	if sc.Client.OwnerPrefix != "" {
		opts = append(opts, WithOwnerPrefix(sc.Client.OwnerPrefix))
	}
	for k, v := range sc.Client.Timing {
		d := time.Duration(v * float64(time.Second))
		switch k {
		case "redial_interval":
			opts = append(opts, func(o *options) { o.redialInterval = d })
		case "refresh_interval":
			opts = append(opts, func(o *options) { o.refreshInterval, o.refreshGap = d, min(o.refreshGap, d) })
		default:
			t.Fatalf("client.timing: unknown period %q", k)
		}
	}
	r.cl = newTestClientWith(t, addrs, opts...)
	for i, st := range sc.Steps {
		r.step(i, st)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.unexpected) > 0 {
		t.Fatalf("requests no rule of the scenario expected: %q", r.unexpected)
	}
}

func (r *scRun) server(name string) *scServer {
	s, ok := r.servers[name]
	if !ok {
		r.t.Fatalf("no server %q in the scenario", name)
	}
	return s
}

// servers is the servers a check names (server or servers).
func (r *scRun) serversOf(one string, many []string) []*scServer {
	names := many
	if one != "" {
		names = append([]string{one}, many...)
	}
	if len(names) == 0 {
		r.t.Fatal("the step names no server")
	}
	var out []*scServer
	for _, n := range names {
		out = append(out, r.server(n))
	}
	return out
}

var placeholder = regexp.MustCompile(`\{([a-z_][a-z0-9_]*)(?::([a-z0-9_]+))?\}`)

// pattern compiles a line pattern (see the README) with the variables bound
// so far; names are the unbound ones, in the order of their groups.
func (r *scRun) pattern(p string) (*regexp.Regexp, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	var b strings.Builder
	b.WriteString("^")
	for i, field := range strings.Fields(p) {
		if i > 0 {
			b.WriteString(" ")
		}
		last := 0
		for _, m := range placeholder.FindAllStringSubmatchIndex(field, -1) {
			b.WriteString(globQuote(field[last:m[0]]))
			last = m[1]
			name := field[m[2]:m[3]]
			if m[4] >= 0 {
				if name != "addr" {
					r.t.Fatalf("pattern %q: unknown placeholder %q", p, field[m[0]:m[1]])
				}
				b.WriteString(regexp.QuoteMeta(r.server(field[m[4]:m[5]]).addr))
				continue
			}
			if v, ok := r.vars[name]; ok {
				b.WriteString(regexp.QuoteMeta(v))
				continue
			}
			names = append(names, name)
			b.WriteString(`(\S+)`)
		}
		b.WriteString(globQuote(field[last:]))
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String()), names
}

// globQuote quotes literal text of a pattern, * matching any run of
// non-space characters.
func globQuote(s string) string {
	parts := strings.Split(s, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, `\S*`)
}

// match matches a received line against a pattern, binding its unbound
// variables when bind is set.
func (r *scRun) match(p, line string, bind bool) bool {
	re, names := r.pattern(p)
	m := re.FindStringSubmatch(strings.Join(strings.Fields(line), " "))
	if m == nil {
		return false
	}
	if bind {
		r.mu.Lock()
		for i, n := range names {
			if _, ok := r.vars[n]; !ok {
				r.vars[n] = m[i+1]
			}
		}
		r.mu.Unlock()
	}
	return true
}

// subst fills a line to send (or an expected value) in.
func (r *scRun) subst(s string) string {
	return placeholder.ReplaceAllStringFunc(s, func(ph string) string {
		m := placeholder.FindStringSubmatch(ph)
		if m[2] != "" {
			return r.server(m[2]).addr
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		v, ok := r.vars[m[1]]
		if !ok {
			r.t.Fatalf("%q: variable %s is not bound yet", s, m[1])
		}
		return v
	})
}

// start serves the server at addr (again).
func (s *scServer) start(t *testing.T, addr string) {
	f := startFakeAt(t, addr)
	f.setCluster(func(nc net.Conn) string {
		s.handle(nc, clusterLine)
		return ""
	})
	s.mu.Lock()
	s.fake = f
	s.mu.Unlock()
	go func() {
		for l := range f.lines {
			s.handle(l.nc, l.text)
		}
	}()
}

func (s *scServer) stop() {
	s.mu.Lock()
	f := s.fake
	s.old = append(s.old, f)
	s.fake = nil
	s.mu.Unlock()
	if f != nil {
		f.close()
	}
}

// handle records a request and answers it by the first rule that matches.
func (s *scServer) handle(nc net.Conn, text string) {
	s.mu.Lock()
	no, ok := s.connNo[nc]
	if !ok {
		s.nextConn++
		no = s.nextConn
		s.connNo[nc] = no
		s.firsts[nc] = text
	}
	s.r.mu.Lock()
	s.r.seq++
	seq := s.r.seq
	s.r.mu.Unlock()
	s.lines = append(s.lines, received{seq, no, nc, text})
	f := s.fake
	s.mu.Unlock()
	rules := s.r.sc.Servers[s.name].Rules
	for i, rule := range rules {
		s.mu.Lock()
		spent := rule.Times > 0 && s.used[i] >= rule.Times
		s.mu.Unlock()
		if spent || rule.After != "" && s.r.firstSeq(rule.After) >= seq || !s.r.match(rule.Match, text, true) {
			continue
		}
		s.mu.Lock()
		s.used[i]++
		s.mu.Unlock()
		var out []string
		for _, l := range rule.Reply {
			out = append(out, s.r.subst(l)+"\n")
		}
		if len(out) > 0 {
			_, _ = nc.Write([]byte(strings.Join(out, "")))
		}
		switch rule.Then {
		case "cut":
			nc.Close()
		case "freeze":
			if f != nil {
				f.freeze(nc)
			}
		}
		return
	}
	if text == clusterLine {
		_, _ = nc.Write([]byte(oldServerAnswer + "\n"))
		return
	}
	s.r.mu.Lock()
	s.r.unexpected = append(s.r.unexpected, s.name+": "+text)
	s.r.mu.Unlock()
}

// matching returns the lines received that match p, binding variables.
func (s *scServer) matching(p string) []received {
	s.mu.Lock()
	lines := append([]received(nil), s.lines...)
	s.mu.Unlock()
	var out []received
	for _, l := range lines {
		if s.r.match(p, l.text, true) {
			out = append(out, l)
		}
	}
	return out
}

// firstSeq is the place of the first request of the run that matches p,
// or one past the last when none does.
func (r *scRun) firstSeq(p string) int {
	first := int(^uint(0) >> 1)
	for _, s := range r.servers {
		if got := s.matching(p); len(got) > 0 {
			first = min(first, got[0].seq)
		}
	}
	return first
}

func (s *scServer) counts() (open, accepted, heartbeats int) {
	s.mu.Lock()
	fakes := append(append([]*fakeServer(nil), s.old...), s.fake)
	s.mu.Unlock()
	for _, f := range fakes {
		if f == nil {
			continue
		}
		accepted += len(f.accepted())
		for _, n := range f.heartbeatCounts() {
			heartbeats += n
		}
	}
	if f := fakes[len(fakes)-1]; f != nil {
		open = f.openCount()
	}
	return open, accepted, heartbeats
}

func (r *scRun) step(i int, st scenarioStep) {
	t := r.t
	t.Helper()
	kinds := 0
	for _, set := range []bool{st.Call != "", st.Join != "", st.GiveUp != "", st.WaitFor != nil,
		st.Do != "", st.ExpectReceived != nil, st.ExpectFirstLines != nil} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		t.Fatalf("step %d: want exactly one of call, join, give_up, wait_for, server/do, expect_received, expect_first_lines", i)
	}
	where := fmt.Sprintf("step %d", i)
	switch {
	case st.Call != "":
		c := r.startCall(i, st)
		if st.Background {
			if st.ID == "" {
				t.Fatalf("%s: a background call needs an id", where)
			}
			return
		}
		r.finish(where+" ("+st.Call+")", st, c)
	case st.Join != "":
		r.mu.Lock()
		c, ok := r.calls[st.Join]
		r.mu.Unlock()
		if !ok {
			t.Fatalf("%s: no call %q to join", where, st.Join)
		}
		r.finish(where+" (join "+st.Join+")", st, c)
	case st.GiveUp != "":
		r.mu.Lock()
		c, ok := r.calls[st.GiveUp]
		r.mu.Unlock()
		if !ok {
			t.Fatalf("%s: no call %q to give up", where, st.GiveUp)
		}
		c.cancel()
	case st.WaitFor != nil:
		within := 5 * time.Second
		if st.Within > 0 {
			within = time.Duration(st.Within * float64(time.Second))
		}
		deadline := time.Now().Add(within)
		for !r.holds(st.WaitFor) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v did not come true within %v", where, *st.WaitFor, within)
			}
			time.Sleep(5 * time.Millisecond)
		}
	case st.Do != "":
		r.serverAction(where, st)
	case st.ExpectReceived != nil:
		e := st.ExpectReceived
		var got []received
		for _, s := range r.serversOf(e.Server, e.Servers) {
			got = append(got, s.matching(e.Match)...)
		}
		if e.Count != nil && len(got) != *e.Count || len(got) < e.AtLeast {
			t.Fatalf("%s: %d requests matching %q, want %s", where, len(got), e.Match, countWant(e))
		}
		if e.Connections > 0 {
			conns := make(map[net.Conn]bool)
			for _, l := range got {
				conns[l.nc] = true
			}
			if len(conns) != e.Connections {
				t.Fatalf("%s: requests matching %q came on %d connections, want %d", where, e.Match, len(conns), e.Connections)
			}
		}
	case st.ExpectFirstLines != nil:
		e := st.ExpectFirstLines
		for _, s := range r.serversOf(e.Server, e.Servers) {
			s.mu.Lock()
			firsts := make([]string, 0, len(s.firsts))
			for _, l := range s.firsts {
				firsts = append(firsts, l)
			}
			s.mu.Unlock()
			if len(firsts) == 0 {
				t.Fatalf("%s: server %s got no request", where, s.name)
			}
			for _, l := range firsts {
				if !r.match(e.Match, l, true) {
					t.Fatalf("%s: a connection to %s began with %q, want %q", where, s.name, l, e.Match)
				}
			}
		}
	}
}

func countWant(e *scenarioReceived) string {
	if e.Count != nil {
		return fmt.Sprint(*e.Count)
	}
	return fmt.Sprintf("at least %d", e.AtLeast)
}

func (r *scRun) holds(c *scenarioCond) bool {
	if c.Lock != "" {
		r.mu.Lock()
		l, ok := r.locks[c.Lock]
		r.mu.Unlock()
		if !ok || c.Lost == nil {
			r.t.Fatalf("wait_for: no lock %q, or no lost", c.Lock)
		}
		select {
		case <-l.Done():
			return *c.Lost == (l.Err() != nil)
		default:
			return !*c.Lost
		}
	}
	servers := r.serversOf(c.Server, c.Servers)
	switch {
	case c.Received != "":
		after := 0
		if c.After != "" {
			after = r.firstSeq(c.After)
		}
		n := 0
		for _, s := range servers {
			for _, l := range s.matching(c.Received) {
				if l.seq > after {
					n++
				}
			}
		}
		return n >= max(c.Count, 1)
	case c.OpenConnections != nil:
		n := 0
		for _, s := range servers {
			open, _, _ := s.counts()
			n += open
		}
		return n == *c.OpenConnections
	case c.Accepted > 0:
		n := 0
		for _, s := range servers {
			_, acc, _ := s.counts()
			n += acc
		}
		return n >= c.Accepted
	case c.Heartbeats > 0:
		n := 0
		for _, s := range servers {
			_, _, hb := s.counts()
			n += hb
		}
		return n >= c.Heartbeats
	}
	r.t.Fatalf("wait_for: no condition in %+v", *c)
	return false
}

func (r *scRun) serverAction(where string, st scenarioStep) {
	t := r.t
	s := r.server(st.Server)
	// last is the connection of the latest request matching
	// on_connection_of.
	last := func() net.Conn {
		got := s.matching(st.OnConnectionOf)
		if len(got) == 0 {
			t.Fatalf("%s: server %s got no request matching %q", where, st.Server, st.OnConnectionOf)
		}
		return got[len(got)-1].nc
	}
	switch st.Do {
	case "send":
		if st.OnConnectionOf == "" || len(st.Lines) == 0 {
			t.Fatalf("%s: send needs on_connection_of and lines", where)
		}
		var out []string
		for _, l := range st.Lines {
			out = append(out, r.subst(l)+"\n")
		}
		if _, err := last().Write([]byte(strings.Join(out, ""))); err != nil {
			t.Fatalf("%s: send: %v", where, err)
		}
	case "cut":
		if st.OnConnectionOf != "" {
			last().Close()
			return
		}
		s.mu.Lock()
		f := s.fake
		s.mu.Unlock()
		if f != nil {
			for _, nc := range f.accepted() {
				nc.Close()
			}
		}
	case "stop":
		s.stop()
	case "start":
		s.mu.Lock()
		running := s.fake != nil
		s.mu.Unlock()
		if running {
			t.Fatalf("%s: server %s runs already", where, st.Server)
		}
		s.start(t, s.addr)
	default:
		t.Fatalf("%s: unknown server action %q", where, st.Do)
	}
}

// startCall starts one call of the client; it runs in its own goroutine,
// with a context the give_up step cancels.
func (r *scRun) startCall(i int, st scenarioStep) *scCall {
	t := r.t
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &scCall{cancel: cancel, done: make(chan struct{}), start: time.Now()}
	lock := func() *Lock {
		r.mu.Lock()
		defer r.mu.Unlock()
		l, ok := r.locks[st.Lock]
		if !ok {
			t.Fatalf("step %d: no lock %q", i, st.Lock)
		}
		return l
	}
	dur := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	var fn func() (any, error)
	switch st.Call {
	case "acquire", "acquire_shared":
		wait := WaitForever
		if st.Wait != nil {
			wait = dur(*st.Wait)
			if *st.Wait == 0 {
				wait = NoWait
			}
		}
		var opts []AcquireOption
		if st.Owner != "" {
			opts = append(opts, WithOwner(r.subst(st.Owner)))
		}
		if st.Call == "acquire_shared" && st.Permits < 1 {
			t.Fatalf("step %d: acquire_shared needs permits", i)
		}
		fn = func() (any, error) {
			var l *Lock
			var err error
			if st.Call == "acquire_shared" {
				l, err = r.cl.AcquireShared(ctx, st.Key, st.Permits, dur(st.Lease), wait, opts...)
			} else {
				l, err = r.cl.Acquire(ctx, st.Key, dur(st.Lease), wait, opts...)
			}
			if err == nil && st.ID != "" {
				r.mu.Lock()
				r.locks[st.ID] = l
				r.mu.Unlock()
			}
			return l, err
		}
	case "release":
		l := lock()
		fn = func() (any, error) {
			err := l.Release(ctx)
			if errors.Is(err, ErrNotHeld) {
				return false, nil
			}
			return err == nil, err
		}
	case "extend":
		l := lock()
		fn = func() (any, error) { return nil, l.Extend(ctx, dur(st.Lease)) }
	case "keep_alive":
		l := lock()
		fn = func() (any, error) { l.KeepAlive(); return nil, nil }
	case "lost":
		l := lock()
		fn = func() (any, error) {
			select {
			case <-l.Done():
				return l.Err() != nil, nil
			default:
				return false, nil
			}
		}
	case "ensure_held":
		l := lock()
		fn = func() (any, error) {
			select {
			case <-l.Done():
				if err := l.Err(); err != nil {
					return nil, err
				}
				return nil, ErrNotHeld // released
			default:
				return nil, nil
			}
		}
	case "query":
		fn = func() (any, error) {
			st, err := r.cl.Query(ctx, st.Key)
			if err != nil || !st.Held {
				return nil, err
			}
			v := map[string]any{"token": st.Token}
			if st.Owner != "" {
				v["owner"] = st.Owner
			}
			return v, nil
		}
	case "members":
		fn = func() (any, error) { return r.cl.Members(ctx) }
	default:
		t.Fatalf("step %d: unknown call %q", i, st.Call)
	}
	if st.ID != "" {
		r.mu.Lock()
		r.calls[st.ID] = c
		r.mu.Unlock()
	}
	go func() {
		defer close(c.done)
		c.value, c.err = fn()
		c.took = time.Since(c.start)
	}()
	return c
}

// finish waits for a call and checks its result against the step's expect.
func (r *scRun) finish(where string, st scenarioStep, c *scCall) {
	t := r.t
	t.Helper()
	within := 10 * time.Second
	if st.Within > 0 {
		within = time.Duration(st.Within * float64(time.Second))
	}
	select {
	case <-c.done:
	case <-time.After(within - time.Since(c.start)):
		t.Fatalf("%s: no result within %v", where, within)
	}
	if st.TookAtLeast > 0 && c.took < time.Duration(st.TookAtLeast*float64(time.Second)) {
		t.Fatalf("%s: took %v, want at least %vs", where, c.took, st.TookAtLeast)
	}
	e := st.Expect
	if e == nil {
		if c.err != nil {
			t.Fatalf("%s: %v", where, c.err)
		}
		return
	}
	if e.Error != "" {
		if c.err == nil {
			t.Fatalf("%s: no error (value %v), want %s", where, c.value, e.Error)
		}
		if !errorIsKind(c.err, e.Error, e.Code) {
			t.Fatalf("%s: error %v, want %s %s", where, c.err, e.Error, e.Code)
		}
		return
	}
	if c.err != nil {
		t.Fatalf("%s: %v", where, c.err)
	}
	if e.Token != nil || e.Owner != nil {
		l, ok := c.value.(*Lock)
		if !ok {
			t.Fatalf("%s: token/owner expected of a %s", where, st.Call)
		}
		if e.Token != nil && l.Token() != *e.Token {
			t.Fatalf("%s: token %d, want %d", where, l.Token(), *e.Token)
		}
		if e.Owner != nil && l.Owner() != r.subst(*e.Owner) {
			t.Fatalf("%s: owner %q, want %q", where, l.Owner(), r.subst(*e.Owner))
		}
	}
	if e.Value != nil {
		var want any
		if err := json.Unmarshal([]byte(r.subst(string(e.Value))), &want); err != nil {
			t.Fatalf("%s: expect.value: %v", where, err)
		}
		var got any
		raw, err := json.Marshal(c.value)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %s, want %s", where, raw, e.Value)
		}
	}
}

// errorIsKind maps the scenarios' error kinds onto the Go client's errors.
func errorIsKind(err error, kind, code string) bool {
	switch kind {
	case "Timeout":
		return errors.Is(err, ErrTimeout)
	case "NotHeld":
		return errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLost)
	case "LockLost":
		return errors.Is(err, ErrLost)
	case "Unavailable":
		return errors.Is(err, ErrUnavailable)
	case "Auth":
		return errors.Is(err, ErrAuth)
	case "GaveUp":
		return errors.Is(err, context.Canceled)
	case "ServerError":
		var se *ServerError
		return errors.As(err, &se) && (code == "" || se.Code == code)
	}
	return false
}
