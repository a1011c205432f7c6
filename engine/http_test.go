package engine

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The execution tracer is served beside the profiler: a trace of every
// goroutine hop is how one request's time is followed across the nodes.
func TestHTTPServesTheTracer(t *testing.T) {
	h := (&Node{}).HTTPHandler()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/pprof/trace?seconds=0.01", nil))
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), "go 1.") {
		t.Fatalf("/debug/pprof/trace: %d, %.20q; want 200 and a Go execution trace", w.Code, w.Body.String())
	}
}
