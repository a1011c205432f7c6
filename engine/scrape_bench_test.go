package engine

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkScrape serves /metrics, /status and /healthz of a real single
// node (Start, its own data dir and ports) that holds no lock, then of one
// that holds 1,000,000: the two must cost the same, since the handlers read
// counters and never walk the keys. The locks are granted by proposing big
// batches of Grants straight to Raft, as another node's entries would
// arrive, which takes seconds instead of a million client round trips.
//
//	go test -run '^$' -bench Scrape -benchtime 200x ./engine
func BenchmarkScrape(b *testing.B) {
	for _, locks := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("locks=%d", locks), func(b *testing.B) {
			n := startTestNode(b, nil)
			holdLocks(b, n, locks)
			if got := n.status().Held; got != int64(locks) {
				b.Fatalf("the node holds %d locks, want %d", got, locks)
			}
			h := n.HTTPHandler()
			for _, path := range []string{"/metrics", "/status", "/healthz"} {
				b.Run(path[1:], func(b *testing.B) {
					req := httptest.NewRequest(http.MethodGet, path, nil)
					for b.Loop() {
						w := discardResponse{header: http.Header{}}
						h.ServeHTTP(&w, req)
						if w.code != 0 && w.code != http.StatusOK {
							b.Fatalf("%s: %d", path, w.code)
						}
					}
				})
			}
		})
	}
}

// discardResponse is an http.ResponseWriter that keeps only the status.
type discardResponse struct {
	header http.Header
	code   int
}

func (d *discardResponse) Header() http.Header         { return d.header }
func (d *discardResponse) Write(p []byte) (int, error) { return io.Discard.Write(p) }
func (d *discardResponse) WriteHeader(code int)        { d.code = code }
