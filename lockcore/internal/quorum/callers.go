package quorum

import (
	"sync"
	"sync/atomic"
)

// callers runs the node calls on goroutines it keeps between calls, at
// most max of them (busy or parked) at once (rule 10). A node call goes
// deep into the node's client (go-redis), and a fresh goroutine grows its
// stack two or three times on the way, copying it each time: a large share
// of the CPU of a lone caller. A kept goroutine has grown its stack
// already (the GC may halve a parked goroutine's stack when little of it
// is used, so some growth comes back after a GC).
//
// A kept goroutine keeps its stack (a few KB to a few tens of KB) until
// close. A call that finds none parked starts one, which runs only that
// call if max are kept already.
//
// Handing a call to a parked goroutine over a channel orders everything
// that goroutine did before (an earlier request's node call) before the new
// request's later steps: the race detector would no longer see a race
// between the two requests. Race builds should therefore keep none
// (Config.Kept 0: a goroutine per call).
type callers struct {
	keep bool        // false: a goroutine per call
	work chan func() // unbuffered: a send succeeds only to a parked goroutine
	stop chan struct{}
	once sync.Once
	max  int32
	live atomic.Int32 // kept goroutines, busy or parked
}

func newCallers(max int) *callers {
	return &callers{keep: max > 0, work: make(chan func()), stop: make(chan struct{}), max: int32(max)}
}

// run calls f on a parked goroutine, or on a new one. It never blocks.
func (c *callers) run(f func()) {
	if !c.keep {
		go f()
		return
	}
	select {
	case c.work <- f:
	default:
		go c.loop(f)
	}
}

// loop calls f, then the calls it is given, until close; or only f, if max
// goroutines are kept already.
func (c *callers) loop(f func()) {
	if c.live.Add(1) > c.max {
		c.live.Add(-1)
		f()
		return
	}
	defer c.live.Add(-1)
	for {
		f()
		f = nil // keep nothing of the last call while parked
		select {
		case f = <-c.work:
		case <-c.stop:
			return
		}
	}
}

// close makes every parked goroutine exit, and each busy one once its call
// ends (one that finds a call offered as it sees close may run that call
// first). Later calls run each on a goroutine that exits after it.
func (c *callers) close() { c.once.Do(func() { close(c.stop) }) }
