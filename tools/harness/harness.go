// Package harness starts real batond processes on 127.0.0.1 and talks to
// them over the line protocol, for baton's end-to-end tests.
//
// It is imported only by tests. Every process it starts is killed when the
// test that started it ends (t.Cleanup), whatever the outcome, and the
// process's output is written to a log file that is dumped into the test's
// log when the test fails. Every wait is bounded in time, and nothing but
// 127.0.0.1 is ever dialed or bound.
//
// A test binary usually builds batond once, from TestMain:
//
//	bin, err := harness.Build(dir)
//
// and then starts nodes with StartNode or StartCluster and talks to them
// with Dial.
package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BuildTimeout bounds Build. A cold build of batond compiles dragonboat and
// pebble, which takes minutes on a small machine.
const BuildTimeout = 8 * time.Minute

// Build compiles github.com/baton-dev/baton/cmd/batond into dir/batond and
// returns the binary's path.
//
// When the calling test binary was itself built with -race, batond is too:
// the server's data races then show up in the tests (see Node), and the
// build reuses the race-instrumented packages the test build left in the
// cache instead of compiling dragonboat and pebble a second time.
func Build(dir string) (bin string, err error) {
	return BuildTags(dir)
}

// BuildTags is Build with build tags (go build -tags), for a batond that
// compiles in code the normal build leaves out, such as the planted bugs of
// the chaos run's mutation check (tag chaosmutation). Only the packages
// that the tags change are compiled again; the rest comes from the build
// cache, race-instrumented or not as for Build.
func BuildTags(dir string, tags ...string) (bin string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin = filepath.Join(dir, "batond")
	var flags []string
	if len(tags) > 0 {
		flags = append(flags, "-tags", strings.Join(tags, ","))
	}
	return bin, goBuild(root, bin, flags...)
}

// BuildSource is Build for another source tree of baton, root: an older
// commit's, say, extracted with git archive, for a test of a rolling
// upgrade. It writes the binary to out, race-instrumented or not as
// Build's, so that the packages the two trees share in the module cache
// come from the build cache. VCS stamping is off: root need not be a work
// tree, and the binary's /status then names no revision.
func BuildSource(root, out string) error {
	return goBuild(root, out, "-buildvcs=false")
}

// goBuild runs go build of batond in the module at root into out, with
// -race when this test binary has it, and flags.
func goBuild(root, out string, flags ...string) error {
	goBin, err := goTool()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, flags...)
	args = append(args, "github.com/baton-dev/baton/cmd/batond")

	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, output)
	}
	return nil
}

// goTool finds the go command. go test puts GOROOT/bin first on the PATH of
// the test binary, so the lookup normally finds the go that runs the tests;
// else $GOROOT/bin/go.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	root := os.Getenv("GOROOT")
	if root == "" {
		return "", errors.New("go command not found on PATH, and GOROOT is not set")
	}
	p := filepath.Join(root, "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("go command not found on PATH nor at %s", p)
	}
	return p, nil
}

// ModuleRoot returns the directory of the go.mod that governs the current
// working directory (a test's package directory, under go test).
func ModuleRoot() (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// built is the batond Main built; "" when it built none.
var built string

// Main is the TestMain of a package with end-to-end tests: it builds batond
// once into a temporary directory, runs the tests, removes the build and
// exits with the tests' status. It builds nothing when no end-to-end test
// will run: under -short (they skip themselves), go test -list (make fuzz
// discovers targets so) or -run '^$' without -bench.
func Main(m *testing.M) {
	flag.Parse()
	if testing.Short() || flag.Lookup("test.list").Value.String() != "" ||
		flag.Lookup("test.run").Value.String() == "^$" && flag.Lookup("test.bench").Value.String() == "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "batond-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
	if built, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "harness: build batond:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Bin returns the batond Main built, and skips t under -short.
func Bin(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	if built == "" {
		t.Fatal("harness: no batond was built: call harness.Main from TestMain")
	}
	return built
}
