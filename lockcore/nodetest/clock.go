package nodetest

import (
	"sync"
	"time"
)

// Clock is a fake clock that moves only when told to. It serves as a
// lockcore.Clock (Options.Clock) and, through its Now method, as a memnode
// clock (memnode.Options.Now), so a Redlock and its nodes can share one
// timeline that a test controls exactly. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
