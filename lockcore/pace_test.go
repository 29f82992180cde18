package lockcore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// paceGrace is the least grace of TestRoundsArePaced: long enough that a
// node the test does not hold answers in time on a busy machine (CI,
// -race).
const paceGrace = 100 * time.Millisecond

// Redlock's rounds are quorum calls with a policy, so package quorum's
// grace and pace apply to them (its tests hold each rule): node 2, held
// at a gate, misses the grace of two acquisitions and is behind; the
// next acquisition does not wait for it; once it answers a round in time
// it is waited for again. The node timeout is far longer than the test,
// so a round that waited for the held node would not return.
func TestRoundsArePaced(t *testing.T) {
	c := newEarlyCluster(t, nil)
	lockcore.SetGraceMin(c.rl, paceGrace)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL}) // the guard's first pass
	n := 0
	acquire := func() {
		t.Helper()
		n++
		req := lockcore.AcquireRequest{Resource: fmt.Sprintf("r%d", n), TTL: earlyTTL}
		within(t, "acquire "+req.Resource, func() { mustAcquire(t, c.rl, req) })
	}
	// On a loaded machine a node may miss the grace of a round of its own.
	for try := 0; slices.ContainsFunc(lockcore.Missed(c.rl), func(m int) bool { return m > 0 }); try++ {
		if try == 20 {
			t.Fatalf("graces missed after 20 rounds with every node answering: %v", lockcore.Missed(c.rl))
		}
		acquire()
		c.settle()
	}
	g0 := lockcore.Graces(c.rl)
	open := c.gate(2)
	defer open()
	acquire()
	acquire()
	if got := lockcore.Missed(c.rl); !slices.Equal(got, []int{0, 0, 2}) || lockcore.Graces(c.rl)-g0 != 2 {
		t.Fatalf("graces missed %v after %d graces; want node 2's two", got, lockcore.Graces(c.rl)-g0)
	}
	if got := lockcore.Behind(c.rl); !slices.Equal(got, []bool{false, false, true}) {
		t.Fatalf("behind %v; want node 2", got)
	}
	acquire()
	if got := lockcore.Graces(c.rl) - g0; got != 2 {
		t.Fatalf("%d graces; want none waited for node 2, behind", got)
	}
	open()
	c.settle()
	for try := 0; lockcore.Behind(c.rl)[2]; try++ {
		if try == 10 {
			t.Fatal("node 2 answered 10 rounds and is still behind")
		}
		acquire()
		c.settle()
	}
}
