package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"
)

// The http-redsync target of TestThroughput: redsync itself, with the
// redsync-3 target's clients and default options (but one try when the
// request does not ask to wait: a 409 at once, as lockgate), behind the same net/http server
// and load generator as http-floor. A PUT is a new redsync Mutex's Lock, a
// DELETE its Unlock; nothing else (no validation, logging, metrics, fencing
// token or waiting). It runs in the uncontended scenarios only.
//
// It is a reference, not a bound (lock work cheaper than redsync's could
// beat it). It answers one question the targets raise: what does serving
// exactly redsync's lock work over HTTP cost on this machine? lockgate-3 ÷
// redsync-3 ≥ 1.0 asks a gateway to beat redsync in-process; http-redsync ÷
// redsync-3 says how far redsync's own work, served, falls short, so how
// much cheaper than redsync's a gateway's lock work would have to be.

// redsyncServer is the http-redsync server (see above).
type redsyncServer struct {
	rs   *redsync.Redsync
	mu   sync.Mutex
	held map[string]*redsync.Mutex // by lease id (the mutex's value)
}

func (s *redsyncServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := route(w, r)
	if !ok {
		return
	}
	switch r.Method {
	case http.MethodPut:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var opts []redsync.Option // redsync-3's defaults when asked to wait
		if !bytes.Contains(body, []byte(`"wait_ms"`)) {
			opts = append(opts, redsync.WithTries(1)) // else 409 at once
		}
		m := s.rs.NewMutex(name, opts...)
		if err := m.LockContext(r.Context()); err != nil {
			w.WriteHeader(http.StatusConflict)
			return
		}
		s.mu.Lock()
		s.held[m.Value()] = m
		s.mu.Unlock()
		granted(w, m.Value())
	case http.MethodDelete:
		lease := r.Header.Get("Lease-Id")
		s.mu.Lock()
		m := s.held[lease]
		if m != nil && m.Name() == name {
			delete(s.held, lease)
		}
		s.mu.Unlock()
		if m == nil || m.Name() != name {
			http.NotFound(w, r)
			return
		}
		if ok, err := m.UnlockContext(r.Context()); err != nil || !ok {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// newRedsyncServerPeer serves redsync over clients as floorPeer serves the
// floor, and reuses lockgatePeer's load generator.
func newRedsyncServerPeer(clients []*redis.Client) floorPeer {
	srv := httptest.NewServer(&redsyncServer{rs: newRedsyncOn(clients).rs, held: map[string]*redsync.Mutex{}})
	return floorPeer{&lockgatePeer{srv: srv, url: srv.URL + "/locks/" + resource}}
}

// TestRedsyncServer checks that http-redsync is a lock: a second acquire of
// a held name fails, a release needs the lease, and a released name can be
// taken again.
func TestRedsyncServer(t *testing.T) {
	c := startCluster(t)
	p := newRedsyncServerPeer(c.clients)
	defer p.close()
	do := lgClient(t)
	first, err := lgAcquire(t.Context(), do, p.url, `{"ttl_ms":10000}`)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.clients[0].Exists(t.Context(), resource).Result(); err != nil || n != 1 {
		t.Fatalf("the lock's key on the first server: %d, %v; want 1", n, err)
	}
	if _, err := lgAcquire(t.Context(), do, p.url, `{"ttl_ms":10000}`); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("second acquire: %v, want 409", err)
	}
	if err := lgRelease(do, p.url, "not-the-lease"); err == nil {
		t.Fatal("a release of another lease succeeded")
	}
	if err := lgRelease(do, p.url, first); err != nil {
		t.Fatal(err)
	}
	second, err := lgAcquire(t.Context(), do, p.url, `{"ttl_ms":10000}`)
	if err != nil || second == first {
		t.Fatalf("acquire after the release: %q, %v", second, err)
	}
	if err := lgRelease(do, p.url, second); err != nil {
		t.Fatal(err)
	}
}
