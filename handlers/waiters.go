package handlers

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/lockgate/lockgate/api"
)

// waiterShares counts each caller's acquisitions with a wait in flight (each
// an open connection that may wait up to its wait_ms), so that one caller
// cannot take every waiting slot of the replica: past its share the caller
// gets 429, while others still wait.
type waiterShares struct {
	share   int
	mu      sync.Mutex
	callers map[string]int // in flight per caller key; no entry at 0
}

// take counts n more waiters for key (1 for a lock, K for a semaphore's
// permit, which waits for each of its K permits), or returns false when
// that would take key past its share.
func (ws *waiterShares) take(key string, n int) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.callers[key]+n > ws.share {
		return false
	}
	ws.callers[key] += n
	return true
}

// done counts n waiters of key less.
func (ws *waiterShares) done(key string, n int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.callers[key] -= n; ws.callers[key] <= 0 {
		delete(ws.callers, key)
	}
}

// Which limit a too-many-waiters problem names (api.Problem.Limit).
const (
	limitCaller  = "caller"
	limitReplica = "replica"
)

// tooManyWaiters answers 429 naming the limit reached.
func tooManyWaiters(w http.ResponseWriter, r *http.Request, limit, detail string) {
	w.Header().Set(api.HeaderRetryAfter, "1")
	p := newProblem(r, http.StatusTooManyRequests, apiTooManyWaiters, detail)
	p.Limit = limit
	writeProblem(w, r, p, apiTooManyWaiters)
}

// overShare answers 429 for a caller that has its share of waiters.
func (ws *waiterShares) overShare(w http.ResponseWriter, r *http.Request) {
	tooManyWaiters(w, r, limitCaller, "this caller has its share of "+strconv.Itoa(ws.share)+
		" waiting acquires on this replica (-max-waiters-per-caller); try again, or without wait_ms")
}
