package memnode

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// The node keeps each held lock in three places, all changed together under
// its mutex: the map by name (Acquire, Release and the rest), a skip list in
// name order (ScanLocks: a seek costs O(log n), a step of count names
// O(count)), and a min-heap by expiry (the sweeper drops expired locks
// without walking the others).

// maxLevel bounds a skip list node's levels: with a quarter of the nodes
// going up each level, 16 levels serve 4^16 locks in O(log n).
const maxLevel = 16

// byName is a skip list of entries in name order. The zero value is not
// usable; see newByName.
type byName struct {
	head  *entry // a sentinel with maxLevel levels
	level int    // levels in use, at least 1
}

func newByName() byName { return byName{head: &entry{next: make([]*entry, maxLevel)}, level: 1} }

// before returns, at every level, the last entry whose name is below name
// (the head where there is none).
func (b *byName) before(name string) (prev [maxLevel]*entry) {
	x := b.head
	for i := b.level - 1; i >= 0; i-- {
		for x.next[i] != nil && x.next[i].name < name {
			x = x.next[i]
		}
		prev[i] = x
	}
	return prev
}

func (b *byName) insert(e *entry) {
	prev := b.before(e.name)
	lvl := 1
	for r := rand.Uint64(); lvl < maxLevel && r&3 == 0; r >>= 2 {
		lvl++
	}
	for ; b.level < lvl; b.level++ {
		prev[b.level] = b.head
	}
	e.next = make([]*entry, lvl)
	for i := range lvl {
		e.next[i], prev[i].next[i] = prev[i].next[i], e
	}
}

func (b *byName) remove(e *entry) {
	prev := b.before(e.name)
	for i := range e.next {
		if prev[i].next[i] == e {
			prev[i].next[i] = e.next[i]
		}
	}
	e.next = nil
	for b.level > 1 && b.head.next[b.level-1] == nil {
		b.level--
	}
}

// from returns the first entry whose name is name or above it (inclusive)
// or above it only (!inclusive), or nil.
func (b *byName) from(name string, inclusive bool) *entry {
	x := b.head
	for i := b.level - 1; i >= 0; i-- {
		for x.next[i] != nil && (x.next[i].name < name || !inclusive && x.next[i].name == name) {
			x = x.next[i]
		}
	}
	return x.next[0]
}

// byExpiry is a min-heap of entries by expiry (container/heap); each entry
// knows its place (entry.at).
type byExpiry []*entry

func (h byExpiry) Len() int           { return len(h) }
func (h byExpiry) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h byExpiry) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *byExpiry) Push(x any) {
	e := x.(*entry)
	e.at = len(*h)
	*h = append(*h, e)
}
func (h *byExpiry) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.at = -1
	return e
}

// add puts e, a new lock on e.name, in the node. n.mu must be held.
func (n *Node) add(e *entry) {
	n.locks[e.name] = e
	n.names.insert(e)
	n.indexRW(e)
	heap.Push(&n.expiry, e)
	n.startSweeper()
}

// drop takes e out of the node. n.mu must be held.
func (n *Node) drop(e *entry) {
	delete(n.locks, e.name)
	n.names.remove(e)
	heap.Remove(&n.expiry, e.at)
	n.unindexRW(e)
}

// expireAt moves e's expiry to t. n.mu must be held.
func (n *Node) expireAt(e *entry, t time.Time) {
	e.expires = t
	heap.Fix(&n.expiry, e.at)
}
