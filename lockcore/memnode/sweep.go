package memnode

import (
	"container/heap"
	"time"
)

// Sweeping bounds.
const (
	// sweepEvery is how often the sweeper drops the locks that have
	// expired: an expired lock is forgotten within about this long, with
	// or without requests.
	sweepEvery = 100 * time.Millisecond
	// sweepBatch bounds the locks dropped under one hold of the node's
	// mutex (each O(log n)), so that a sweep of many never stalls the
	// calls waiting for the mutex.
	sweepBatch = 256
)

// startSweeper starts the sweeper unless it runs, or the node is closed.
// The sweeper runs while the node holds locks. n.mu must be held.
func (n *Node) startSweeper() {
	if n.sweeping || n.closed {
		return
	}
	n.sweeping = true
	n.sweepers.Add(1)
	go n.sweep()
}

// sweep drops expired locks every sweepEvery, in batches of sweepBatch,
// until Close or until the node holds no lock (add starts it again).
func (n *Node) sweep() {
	defer n.sweepers.Done()
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		for more := true; more; {
			n.mu.Lock()
			more = n.expireSome(sweepBatch)
			if len(n.locks) == 0 {
				n.sweeping = false
				n.mu.Unlock()
				return
			}
			n.mu.Unlock()
		}
	}
}

// expireSome drops up to max expired locks, earliest first, and reports
// whether expired ones may be left. n.mu must be held.
func (n *Node) expireSome(max int) bool {
	now := n.now()
	for range max {
		if len(n.expiry) == 0 || now.Before(n.expiry[0].expires) {
			return false
		}
		e := heap.Pop(&n.expiry).(*entry)
		delete(n.locks, e.name)
		n.names.remove(e)
		n.unindexRW(e)
	}
	return true
}

// Close stops the node's sweeper and waits for it to return. The node
// still answers every call afterwards; an expired lock is then dropped when
// its name is next used. Close may be called more than once.
func (n *Node) Close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.closeOnce.Do(func() { close(n.stop) })
	n.sweepers.Wait()
}
