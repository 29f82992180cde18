package lockcore

import (
	"context"
	"sync"
	"sync/atomic"
)

// lateLease is a lease whose acquisition round was decided before every
// node had answered, while the late answers are acted on (see
// Redlock.lateAcquire). Two things follow:
//   - a node may grant it after the caller released it (the release can
//     reach that node first), so a Release of the lease marks it released,
//     and a grant heard after the mark is released again;
//   - acting on a late answer (undoing a grant, giving back a copy with a
//     higher token) must not touch a copy that a later round of the same
//     lease made: the next round of a waiting Acquire, or a client's retry
//     with the same lease id. So a round for the lease first waits, through
//     this Redlock, until the earlier round's late answers are done (at
//     most a node timeout). Another gateway replica does not know of it.
type lateLease struct {
	key      string
	released atomic.Bool
	done     chan struct{} // closed when the late answers are acted on
}

// lateLeases tracks the leases whose acquisition still has calls under way.
type lateLeases struct {
	n  atomic.Int32 // len(m), read without the lock on the hot path
	mu sync.Mutex
	m  map[string]*lateLease
}

func lateKey(resource, lease string) string { return resource + "\x00" + lease }

// begin starts tracking a lease; end stops it.
func (ls *lateLeases) begin(resource, lease string) *lateLease {
	l := &lateLease{key: lateKey(resource, lease), done: make(chan struct{})}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[string]*lateLease{}
	}
	ls.m[l.key] = l
	ls.n.Store(int32(len(ls.m)))
	return l
}

func (ls *lateLeases) end(l *lateLease) {
	ls.mu.Lock()
	if ls.m[l.key] == l {
		delete(ls.m, l.key)
	}
	ls.n.Store(int32(len(ls.m)))
	ls.mu.Unlock()
	close(l.done)
}

func (ls *lateLeases) get(resource, lease string) *lateLease {
	if ls.n.Load() == 0 {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[lateKey(resource, lease)]
}

// release marks the lease released, if it is tracked.
func (ls *lateLeases) release(resource, lease string) {
	if l := ls.get(resource, lease); l != nil {
		l.released.Store(true)
	}
}

// wait returns once no earlier round of the lease has late answers still
// to act on, or ctx has ended.
func (ls *lateLeases) wait(ctx context.Context, resource, lease string) {
	for l := ls.get(resource, lease); l != nil; l = ls.get(resource, lease) {
		select {
		case <-l.done:
		case <-ctx.Done():
			return
		}
	}
}
