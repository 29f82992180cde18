package lockcore

import (
	"sync"
	"sync/atomic"
)

// callers runs the rounds' node calls on goroutines it keeps between
// calls, at most max of them (busy or parked) at once. A node call goes
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
// between the two requests. Race builds (raceBuild) therefore start a
// goroutine per call, unless a test turns keeping on (export_test.go).
type callers struct {
	keep bool        // false: a goroutine per call
	work chan func() // unbuffered: a send succeeds only to a parked goroutine
	stop chan struct{}
	once sync.Once
	max  int32
	live atomic.Int32 // kept goroutines, busy or parked
}

// maxCallers is the default callers.max: room for every node call of 64
// rounds over 3 nodes (192) in flight at once, and some more.
const maxCallers = 256

func newCallers(max int32, keep bool) *callers {
	return &callers{keep: keep, work: make(chan func()), stop: make(chan struct{}), max: max}
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
