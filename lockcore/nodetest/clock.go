package nodetest

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// Clock is a fake clock that moves only when told to. It serves as a
// lockcore.Clock (Options.Clock) and, through its Now method, as a memnode
// clock (memnode.Options.Now), so a Redlock and its nodes can share one
// timeline that a test controls exactly. It is safe for concurrent use.
//
// Its timers (AfterFunc) fire only when Advance moves the clock to or past
// their time, each in its own goroutine. A timer set for a time already
// reached fires at once. Sleepers and
// WaitSleepers let a test see who is waiting on the clock, so that it
// moves time only once they sleep: a waiting Redlock's waiter that sleeps
// has set exactly one timer.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers timerHeap
	seq    uint64
	set    int           // timers set so far
	change chan struct{} // closed and replaced whenever the set of timers changes
}

type timer struct {
	at    time.Time
	seq   uint64 // ties fire in the order they were set
	f     func()
	index int // in the heap; -1 once fired or stopped
}

// NewClock returns a Clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start, change: make(chan struct{})} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f in its own goroutine once the clock reaches Now()+d (at
// once when d <= 0), unless stop is called first; stop reports whether it
// prevented the call.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set++
	c.seq++
	t := &timer{at: c.now.Add(d), seq: c.seq, f: f}
	if d <= 0 {
		t.index = -1
		go f()
		c.changed()
		return func() bool { return false }
	}
	heap.Push(&c.timers, t)
	c.changed()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.index < 0 {
			return false
		}
		heap.Remove(&c.timers, t.index)
		c.changed()
		return true
	}
}

// Advance moves the clock forward by d and fires every timer whose time it
// reached.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	fired := false
	for len(c.timers) > 0 && !c.timers[0].at.After(c.now) {
		t := heap.Pop(&c.timers).(*timer)
		go t.f()
		fired = true
	}
	if fired {
		c.changed()
	}
}

// Sleepers returns the times of the timers set and not yet fired or
// stopped, earliest first.
func (c *Clock) Sleepers() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.at)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// TimersSet returns how many timers were set on the clock so far, fired or
// not: a test can tell from it whether a sleeper woke and slept again.
func (c *Clock) TimersSet() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.set
}

// WaitSleepers waits until exactly n timers are pending, or until timeout
// (real time) passes, and reports whether it saw n.
func (c *Clock) WaitSleepers(n int, timeout time.Duration) bool {
	return c.WaitFor(func(s []time.Time) bool { return len(s) == n }, timeout)
}

// WaitFor waits until cond holds of the pending timers' times (as
// Sleepers returns them), or until timeout (real time) passes, and reports
// whether it saw cond hold. cond is asked again whenever a timer is set,
// stopped or fired.
func (c *Clock) WaitFor(cond func(sleepers []time.Time) bool, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		change := c.change
		c.mu.Unlock()
		if cond(c.Sleepers()) {
			return true
		}
		select {
		case <-change:
		case <-deadline.C:
			return false
		}
	}
}

// changed wakes WaitFor; c.mu must be held.
func (c *Clock) changed() {
	close(c.change)
	c.change = make(chan struct{})
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
