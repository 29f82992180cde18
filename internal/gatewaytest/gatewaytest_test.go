package gatewaytest_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// An in-process gateway answers the API through its front, and is ready
// when InProcess returns.
func TestInProcessServesTheAPIThroughItsFront(t *testing.T) {
	var seen atomic.Int64
	front := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen.Add(1)
			next.ServeHTTP(w, r)
		})
	}
	srv := gatewaytest.InProcess(t, []lockcore.Node{memnode.New(nil)}, &gatewaytest.InProcessOptions{Front: front})
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") || srv.Locker == nil {
		t.Fatalf("server %+v", srv)
	}
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || seen.Load() != 1 {
		t.Fatalf("/readyz: %s, %d requests through the front; want 200 and 1", resp.Status, seen.Load())
	}
}
