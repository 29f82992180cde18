package nodetest_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

var _ lockcore.Clock = (*nodetest.Clock)(nil)

func TestClockFiresTimersOnlyWhenAdvancedToThem(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := nodetest.NewClock(start)
	var mu sync.Mutex
	var fired []string
	done := make(chan struct{}, 4)
	timer := func(name string, d time.Duration) func() bool {
		return c.AfterFunc(d, func() {
			mu.Lock()
			fired = append(fired, name)
			mu.Unlock()
			done <- struct{}{}
		})
	}
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(fired)
		slices.Sort(out)
		return out
	}
	timer("a", 10*time.Millisecond)
	timer("b", 20*time.Millisecond)
	stopC := timer("c", 20*time.Millisecond)
	if s := c.Sleepers(); len(s) != 3 || !s[0].Equal(start.Add(10*time.Millisecond)) {
		t.Fatalf("sleepers %v, want three, the first at +10ms", s)
	}
	if !stopC() || stopC() {
		t.Fatal("stop of a pending timer: want true once, then false")
	}
	c.Advance(9 * time.Millisecond)
	if !c.WaitSleepers(2, time.Second) || len(got()) != 0 {
		t.Fatalf("fired %v before their time", got())
	}
	c.Advance(11 * time.Millisecond) // to +20ms: a and b are due
	<-done
	<-done
	if g := got(); !slices.Equal(g, []string{"a", "b"}) {
		t.Fatalf("fired %v, want a and b", g)
	}
	if !c.WaitSleepers(0, time.Second) {
		t.Fatalf("sleepers %v after all fired", c.Sleepers())
	}
	timer("now", 0) // a time already reached fires at once
	<-done
	if n := c.TimersSet(); n != 4 {
		t.Fatalf("TimersSet = %d, want 4", n)
	}
	if c.WaitSleepers(1, 10*time.Millisecond) {
		t.Fatal("WaitSleepers saw a sleeper that is not there")
	}
	if !c.Now().Equal(start.Add(20 * time.Millisecond)) {
		t.Fatalf("Now = %v, want start + 20ms", c.Now())
	}
}

func TestClockWaitForSeesTimersSetLater(t *testing.T) {
	start := time.Unix(1000, 0)
	c := nodetest.NewClock(start)
	at := start.Add(time.Second)
	later := func(s []time.Time) bool { return len(s) == 1 && s[0].Equal(at) }
	if c.WaitFor(later, 10*time.Millisecond) {
		t.Fatal("WaitFor saw a timer that is not set")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.AfterFunc(time.Second, func() {})
	}()
	if !c.WaitFor(later, 5*time.Second) {
		t.Fatalf("WaitFor did not see the timer set at %v: %v", at, c.Sleepers())
	}
}
