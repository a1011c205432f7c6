package harness

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeEnv makes the test binary behave as a fake batond, so that the node
// life cycle can be tested without the real server.
const fakeEnv = "HARNESS_FAKE_BATOND"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeBatond(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeBatond takes batond's flags, answers "Q <key>" with FREE on the
// client address of its --id (ERR unavailable during --unready-for), and
// exits 0 on SIGTERM. --exit N exits at once with a batond-style message;
// --in-use-once FILE fails like a taken port on its first run only.
func fakeBatond(args []string) int {
	fs := flag.NewFlagSet("batond", flag.ContinueOnError)
	id := fs.Int("id", 1, "")
	peers := fs.String("peers", "127.0.0.1:7701/127.0.0.1:7700", "")
	data := fs.String("data", "./baton-data", "")
	fs.Int("shards", 4, "")
	fs.String("http", "", "")
	unready := fs.Duration("unready-for", 0, "")
	exit := fs.Int("exit", -1, "")
	inUseOnce := fs.String("in-use-once", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *exit >= 0 {
		fmt.Fprintf(os.Stderr, "batond: told to exit %d\n", *exit)
		return *exit
	}
	if *inUseOnce != "" {
		if _, err := os.Stat(*inUseOnce); err != nil {
			os.WriteFile(*inUseOnce, nil, 0o644)
			fmt.Fprintln(os.Stderr, "batond: listen tcp: bind: address already in use")
			return 1
		}
	}
	// Count the starts in the data dir, so a test can see a restart reuse it.
	if err := os.MkdirAll(*data, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "batond:", err)
		return 1
	}
	f, err := os.OpenFile(filepath.Join(*data, "starts"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "batond:", err)
		return 1
	}
	f.WriteString("x")
	f.Close()

	client := strings.Split(strings.Split(*peers, ",")[*id-1], "/")[1]
	l, err := net.Listen("tcp", client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "batond:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "fake batond serving on", client, "saying", os.Getenv("HARNESS_FAKE_SAY"))
	readyAt := time.Now().Add(*unready)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					f := strings.Fields(sc.Text())
					if len(f) != 2 || f[0] != "Q" {
						fmt.Fprintf(c, "? - ERR badrequest fake\n")
					} else if time.Now().Before(readyAt) {
						fmt.Fprintf(c, "Q %s ERR unavailable\n", f[1])
					} else {
						fmt.Fprintf(c, "Q %s FREE\n", f[1])
					}
				}
			}()
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

// fakeBin makes nodes started by this test run the fake batond.
func fakeBin(t *testing.T) string {
	t.Setenv(fakeEnv, "1")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func starts(t *testing.T, n *Node) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.DataDir, "starts"))
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func TestNodeLifeCycle(t *testing.T) {
	bin := fakeBin(t)
	start := time.Now()
	n := StartNode(t, bin, Options{Args: []string{"--unready-for", "300ms"}})
	if time.Since(start) < 300*time.Millisecond {
		t.Errorf("StartNode returned after %v, before the node answered anything but ERR unavailable", time.Since(start))
	}
	wantArgs := fmt.Sprintf("--id 1 --peers %s/%s --data %s --shards 4 --unready-for 300ms", n.RaftAddr, n.ClientAddr, n.DataDir)
	if got := strings.Join(n.Args, " "); got != wantArgs {
		t.Errorf("args %q, want %q", got, wantArgs)
	}
	if filepath.Dir(n.LogPath) != filepath.Dir(n.DataDir) {
		t.Errorf("log %s is not beside the data dir %s", n.LogPath, n.DataDir)
	}

	c := Dial(t, n.ClientAddr)
	c.Send("Q a")
	c.Expect(t, "Q a FREE")

	n.Pause()
	c.Send("Q b")
	c.ExpectNothing(t, 300*time.Millisecond)
	n.Resume()
	c.Expect(t, "Q b FREE")

	code, err := n.Stop()
	if err != nil || code != 0 {
		t.Fatalf("Stop: code %d, err %v; want 0, nil", code, err)
	}
	if n.Running() {
		t.Fatal("running after Stop")
	}

	n.Restart()
	if got := starts(t, n); got != 2 {
		t.Errorf("data dir saw %d starts, want 2", got)
	}
	Dial(t, n.ClientAddr).Do(t, "Q c")

	n.Kill()
	if n.Running() {
		t.Fatal("running after Kill")
	}
	if code, err := n.Wait(time.Second); err != nil || code != -1 {
		t.Errorf("after Kill: code %d, err %v; want -1, nil", code, err)
	}
	if log := n.Log(); strings.Count(log, "=== harness") != 2 || !strings.Contains(log, "fake batond serving") {
		t.Errorf("log does not show two runs:\n%s", log)
	}
}

func TestStartClusterPeers(t *testing.T) {
	bin := fakeBin(t)
	nodes := StartCluster(t, bin, 3, Options{Shards: 2, HTTP: true})
	for i, n := range nodes {
		if n.ID != i+1 {
			t.Errorf("node %d has ID %d", i, n.ID)
		}
		if n.Peers != nodes[0].Peers {
			t.Errorf("node %d peers %q, node 1 peers %q", n.ID, n.Peers, nodes[0].Peers)
		}
		if !strings.Contains(n.Peers, n.RaftAddr+"/"+n.ClientAddr) || n.HTTPAddr == "" {
			t.Errorf("node %d: addresses %s %s %s not in %q", n.ID, n.RaftAddr, n.ClientAddr, n.HTTPAddr, n.Peers)
		}
		want := fmt.Sprintf("--id %d --peers %s --data %s --shards 2 --http %s", n.ID, n.Peers, n.DataDir, n.HTTPAddr)
		if got := strings.Join(n.Args, " "); got != want {
			t.Errorf("args %q, want %q", got, want)
		}
	}
}

func TestRetryOnAddressInUse(t *testing.T) {
	bin := fakeBin(t)
	marker := filepath.Join(t.TempDir(), "failed-once")
	n := StartNode(t, bin, Options{Args: []string{"--in-use-once", marker}})
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the first run did not fail: %v", err)
	}
	Dial(t, n.ClientAddr).Do(t, "Q a")
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	bin := fakeBin(t)
	dir := t.TempDir()
	n := NewNode(t, bin, dir, FreeAddr(t), "--exit", "3")
	if err := n.spawn(); err != nil {
		t.Fatal(err)
	}
	err := n.waitReady(time.Now().Add(10 * time.Second))
	if err == nil || !strings.Contains(err.Error(), "told to exit 3") {
		t.Fatalf("waitReady: %v; want the process's message", err)
	}
	if code, _ := n.Wait(time.Second); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
}

func TestWaitReadyTimesOut(t *testing.T) {
	bin := fakeBin(t)
	n := NewNode(t, bin, t.TempDir(), "", "--unready-for", "1h")
	addrs := FreeAddrs(t, 2)
	n.ClientAddr = addrs[1]
	n.Args = append(n.Args, "--peers", addrs[0]+"/"+addrs[1], "--data", filepath.Join(n.Dir, "data"))
	n.ReadyTimeout = 300 * time.Millisecond
	if err := n.spawn(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := n.waitReady(time.Now().Add(n.ReadyTimeout))
	if err == nil || !strings.Contains(err.Error(), "ERR unavailable") {
		t.Fatalf("waitReady: %v; want a timeout showing the last answer", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waitReady took %v with a 300ms deadline", d)
	}
}

func TestRun(t *testing.T) {
	bin := fakeBin(t)
	res := Run(t, bin, "", 10*time.Second, "--exit", "2")
	if res.Code != 2 || res.TimedOut || res.Stderr != "batond: told to exit 2\n" {
		t.Errorf("got %+v", res)
	}
	res = Run(t, bin, "", 300*time.Millisecond, "--peers", "127.0.0.1:1/"+FreeAddr(t))
	if !res.TimedOut || res.Code != -1 {
		t.Errorf("a server that keeps running: got %+v, want TimedOut", res)
	}
}

func TestFreeAddrs(t *testing.T) {
	addrs := FreeAddrs(t, 20)
	seen := map[string]bool{}
	for _, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
			t.Fatalf("bad or repeated address %q in %v", a, addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		l.Close()
		// Below the ephemeral range, where the kernel gives no outgoing
		// connection a port (where the range is known).
		_, port, _ := net.SplitHostPort(a)
		if p, _ := strconv.Atoi(port); ephemeralLow() > lowestPort && (p < lowestPort || p >= ephemeralLow()) {
			t.Errorf("%s: not in [%d, %d)", a, lowestPort, ephemeralLow())
		}
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "module github.com/baton-dev/baton\n") {
		t.Errorf("%s/go.mod is not baton's", root)
	}
}

// lineServer accepts one connection and hands it to the test.
func lineServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		t.Cleanup(func() { c.Close() })
		ch <- c
	}()
	return l.Addr().String(), ch
}

func TestConn(t *testing.T) {
	addr, accepted := lineServer(t)
	c := Dial(t, addr)
	srv := <-accepted
	sr := bufio.NewReader(srv)

	// Send writes all lines in one write.
	c.Send("A k 1 0", "Q k")
	want := "A k 1 0\nQ k\n"
	buf := make([]byte, len(want))
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(sr, buf); err != nil || string(buf) != want {
		t.Fatalf("server read %q, %v; want %q", buf, err, want)
	}

	// Nothing sent: ReadLine times out, and ExpectNothing is satisfied.
	if _, err := c.ReadLine(50 * time.Millisecond); !IsTimeout(err) {
		t.Fatalf("ReadLine on a silent connection: %v, want a timeout", err)
	}
	c.ExpectNothing(t, 50*time.Millisecond)

	// A line cut by a timeout is completed by the next read, and a CR is
	// kept.
	srv.Write([]byte("A k O"))
	if l, err := c.ReadLine(100 * time.Millisecond); !IsTimeout(err) {
		t.Fatalf("ReadLine on a partial line: %q, %v; want a timeout", l, err)
	}
	srv.Write([]byte("K 1\r\nQ k FREE\n"))
	c.Expect(t, "A k OK 1\r")
	c.Expect(t, "Q k FREE")

	// ReadLines and Do.
	srv.Write([]byte("a\nb\nc\n"))
	lines, err := c.ReadLines(3, time.Second)
	if err != nil || strings.Join(lines, ",") != "a,b,c" {
		t.Fatalf("ReadLines: %q, %v", lines, err)
	}
	go func() {
		l, _ := sr.ReadString('\n')
		srv.Write([]byte("echo " + l))
	}()
	if got := c.Do(t, "ping"); got != "echo ping" {
		t.Fatalf("Do: %q", got)
	}
	if _, err := c.ReadLines(2, 50*time.Millisecond); !IsTimeout(err) {
		t.Fatalf("ReadLines with nothing to read: %v, want a timeout", err)
	}

	// A long line spans several buffer fills.
	long := strings.Repeat("x", 200<<10)
	go srv.Write([]byte(long + "\n"))
	if got, err := c.ReadLine(5 * time.Second); err != nil || got != long {
		t.Fatalf("long line: %d bytes, %v", len(got), err)
	}

	// Closing is seen by the server, and the end of stream by the client.
	srv.Close()
	if _, err := c.ReadLine(time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after the server closed: %v, want EOF", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("a", 100) + strings.Repeat("z", 100)
	got := clip(s, 80)
	if !strings.HasPrefix(got, "aaaaaaaaaa") || !strings.HasSuffix(got, strings.Repeat("z", 70)) || !strings.Contains(got, "120 bytes left out") {
		t.Errorf("clip: %q", got)
	}
	if clip("short", 80) != "short" {
		t.Error("clip changed a short string")
	}
}
