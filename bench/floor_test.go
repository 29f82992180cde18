package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The http-floor target of TestThroughput: a lock server that speaks the
// same HTTP as lockgate to the same load generator (lgClient, the
// contender of lockgatePeer) but does no lock work at all. A lock is an
// entry in a map under one mutex, its waiters a FIFO of channels; a release
// hands the lock to the first waiter. No Redis, no lockcore, no validation,
// no logging, no metrics: what is left is net/http's server and client on
// loopback and the goroutine wake-ups between them.
//
// It measures what HTTP alone costs on this machine, and so bounds every
// lock served over it, lockgate's included. In the contended scenarios in
// particular, a hand-off needs the releasing holder's DELETE to reach the
// server and the waiter's 201 to reach the waiter: that is the floor's idle
// time between two holds, and no HTTP lock service has less.

// floorServer is the http-floor lock server (see above).
type floorServer struct {
	mu    sync.Mutex
	next  uint64
	locks map[string]*floorLock
}

// floorLock is one held lock: its lease and its waiters, first first.
type floorLock struct {
	lease string
	queue []chan string // each gets the lease id it is granted
}

func newFloorServer() *floorServer { return &floorServer{locks: map[string]*floorLock{}} }

// lease returns a new lease id; s.mu is held.
func (s *floorServer) lease() string {
	s.next++
	return "floor-lease-" + strconv.FormatUint(s.next, 10)
}

// route answers /readyz and every path outside /locks/ itself, and returns
// the lock's name of a request it leaves to the server.
func route(w http.ResponseWriter, r *http.Request) (string, bool) {
	name, ok := strings.CutPrefix(r.URL.Path, "/locks/")
	switch {
	case r.URL.Path == "/readyz":
		w.WriteHeader(http.StatusOK)
		return "", false
	case !ok:
		http.NotFound(w, r)
		return "", false
	}
	return name, true
}

func (s *floorServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := route(w, r)
	if !ok {
		return
	}
	switch r.Method {
	case http.MethodPut:
		s.acquire(w, r, name)
	case http.MethodDelete:
		s.mu.Lock()
		found := s.release(name, r.Header.Get("Lease-Id"))
		s.mu.Unlock()
		if !found {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// acquire takes the lock if it is free, or, when the body asks to wait
// ("wait_ms"), queues until a release hands it over or the request ends.
func (s *floorServer) acquire(w http.ResponseWriter, r *http.Request, name string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	l := s.locks[name]
	if l == nil {
		lease := s.lease()
		s.locks[name] = &floorLock{lease: lease}
		s.mu.Unlock()
		granted(w, lease)
		return
	}
	if !bytes.Contains(body, []byte(`"wait_ms"`)) {
		s.mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		return
	}
	ch := make(chan string, 1)
	l.queue = append(l.queue, ch)
	s.mu.Unlock()
	select {
	case lease := <-ch:
		granted(w, lease)
	case <-r.Context().Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if l := s.locks[name]; l != nil {
			if i := slices.Index(l.queue, ch); i >= 0 {
				l.queue = slices.Delete(l.queue, i, i+1)
				return
			}
		}
		select {
		case lease := <-ch: // granted as the request ended: pass it on
			s.release(name, lease)
		default:
		}
	}
}

// release ends lease's hold of name, handing the lock to the first waiter
// if there is one; s.mu is held. It reports whether lease held name.
func (s *floorServer) release(name, lease string) bool {
	l := s.locks[name]
	if l == nil || l.lease != lease {
		return false
	}
	if len(l.queue) == 0 {
		delete(s.locks, name)
		return true
	}
	next := l.queue[0]
	l.queue = l.queue[1:]
	l.lease = s.lease()
	next <- l.lease
	return true
}

// granted writes a 201 with the lease id, in a header as lockgate's and in
// a body about the size of lockgate's.
func granted(w http.ResponseWriter, lease string) {
	w.Header().Set("Lease-Id", lease)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"lease_id":"`+lease+`","fencing_token":1,"ttl_ms":10000,"validity_ms":9990}`)
}

// floorPeer runs the http-floor server in-process, as lockgatePeer runs the
// gateway, and reuses lockgatePeer's load generator.
type floorPeer struct{ *lockgatePeer }

func newFloorPeer() floorPeer {
	srv := httptest.NewServer(newFloorServer())
	return floorPeer{&lockgatePeer{srv: srv, url: srv.URL + "/locks/" + resource}}
}

func (p floorPeer) close() { p.srv.Close() }

// TestFloorServer checks that the floor is a lock: one holder at a time,
// waiters served first come first served, a refusal without wait_ms.
func TestFloorServer(t *testing.T) {
	p := newFloorPeer()
	defer p.close()
	fs := p.srv.Config.Handler.(*floorServer)
	do := lgClient(t)
	url := p.url
	first, err := lgAcquire(t.Context(), do, url, `{"ttl_ms":10000}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lgAcquire(t.Context(), do, url, `{"ttl_ms":10000}`); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("second acquire without wait: %v, want 409", err)
	}
	got := make(chan string, 2)
	for i := range 2 {
		go func() {
			lease, err := lgAcquire(t.Context(), lgClient(t), url, `{"ttl_ms":10000,"wait_ms":30000}`)
			if err != nil {
				t.Error(err)
			}
			got <- lease
		}()
		for { // the waiters queue in order
			fs.mu.Lock()
			n := len(fs.locks[resource].queue)
			fs.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := lgRelease(do, url, "not-the-lease"); err == nil {
		t.Fatal("a release of another lease succeeded")
	}
	if err := lgRelease(do, url, first); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second != "floor-lease-2" {
		t.Fatalf("first waiter got %q, want floor-lease-2", second)
	}
	if err := lgRelease(do, url, second); err != nil {
		t.Fatal(err)
	}
	if third := <-got; third != "floor-lease-3" {
		t.Fatalf("second waiter got %q, want floor-lease-3", third)
	}
}
