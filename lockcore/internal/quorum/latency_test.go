package quorum

import (
	"context"
	"fmt"
	"testing"
	"time"
)

const ms = time.Millisecond

// Rule 8: the timeout of a call from the nodes' estimates.
func TestCallTimeout(t *testing.T) {
	tests := []struct {
		name       string
		estimates  []time.Duration
		quorum     int
		base, most time.Duration
		want       time.Duration
	}{
		{"no estimates yet: the base", []time.Duration{0, 0, 0}, 2, 50 * ms, 500 * ms, 50 * ms},
		{"quick nodes: the base", []time.Duration{ms, 2 * ms, 3 * ms}, 2, 50 * ms, 500 * ms, 50 * ms},
		{"every node slow: k times the quorum-th", []time.Duration{100 * ms, 120 * ms, 130 * ms}, 2, 50 * ms, 500 * ms, 360 * ms},
		{"a slow minority does not raise it", []time.Duration{ms, 2 * ms, 500 * ms}, 2, 50 * ms, 500 * ms, 50 * ms},
		{"a minority that failed (censored at the timeout) does not raise it", []time.Duration{ms, 2 * ms, 50 * ms}, 2, 50 * ms, 500 * ms, 50 * ms},
		{"a slow majority raises it, up to most", []time.Duration{ms, 200 * ms, 300 * ms}, 2, 50 * ms, 500 * ms, 500 * ms},
		{"the quorum-th of five", []time.Duration{0, 0, 100 * ms, 110 * ms, 500 * ms}, 3, 50 * ms, 500 * ms, 300 * ms},
		{"the order of the nodes does not matter", []time.Duration{500 * ms, 100 * ms, 0, 110 * ms, 0}, 3, 50 * ms, 500 * ms, 300 * ms},
		{"ties", []time.Duration{40 * ms, 40 * ms, 40 * ms}, 2, 50 * ms, 500 * ms, 120 * ms},
		{"one node", []time.Duration{30 * ms}, 1, 50 * ms, 500 * ms, 90 * ms},
		{"no adaptation: most equal to base", []time.Duration{200 * ms, 200 * ms, 200 * ms}, 2, 50 * ms, 50 * ms, 50 * ms},
		{"no adaptation: most 0", []time.Duration{200 * ms, 200 * ms, 200 * ms}, 2, 50 * ms, 0, 50 * ms},
		{"the largest estimate kept", []time.Duration{maxEst, maxEst, maxEst}, 2, 50 * ms, time.Hour, 3 * maxEst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := callTimeout(tt.estimates, tt.quorum, tt.base, tt.most); got != tt.want {
				t.Fatalf("callTimeout(%v, %d, %v, %v) = %v, want %v", tt.estimates, tt.quorum, tt.base, tt.most, got, tt.want)
			}
		})
	}
}

// Rule 8: what an answer adds to its node's estimate.
func TestSample(t *testing.T) {
	tests := []struct {
		name             string
		at               time.Time
		failed, canceled bool
		want             time.Duration
		ok               bool
	}{
		{"an answer: the time it took", at(120), false, false, 120 * ms, true},
		{"an answer after the deadline: the time it took", at(700), false, false, 700 * ms, true},
		{"a failure at the deadline: censored at it", at(500), true, false, 500 * ms, true},
		{"a quick failure: censored at the deadline too", at(1), true, false, 500 * ms, true},
		{"a failure of a call the caller canceled: nothing", at(3), true, true, 0, false},
		{"an answer of a call the caller canceled: the time it took", at(3), false, true, 3 * ms, true},
	}
	for _, tt := range tests {
		if got, ok := sample(at(0), tt.at, at(500), tt.failed, tt.canceled); got != tt.want || ok != tt.ok {
			t.Errorf("%s: sample %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// Rule 8: the decaying maximum, sample by sample.
func TestEstimateSampled(t *testing.T) {
	type step struct {
		sample time.Duration // negative: no sample, read only
		atMs   uint64
		want   time.Duration // the estimate as of atMs, afterwards
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"rises at once to a larger sample", []step{
			{10 * ms, 0, 10 * ms}, {120 * ms, 1, 120 * ms},
		}},
		{"a smaller sample leaves it", []step{
			{120 * ms, 0, 120 * ms}, {ms, 1, 120 * ms},
		}},
		{"halves every half-life", []step{
			{120 * ms, 1000, 120 * ms}, {-1, 3000, 60 * ms}, {-1, 5000, 30 * ms}, {ms, 7000, 15 * ms},
		}},
		{"a smaller sample takes over once the estimate has decayed below it", []step{
			{120 * ms, 0, 120 * ms}, {40 * ms, 4000, 40 * ms}, {-1, 6000, 20 * ms},
		}},
		{"a sample older than the estimate does not move it back in time", []step{
			{120 * ms, 2000, 120 * ms}, {10 * ms, 1000, 120 * ms}, {-1, 4000, 60 * ms},
		}},
		{"an older, larger sample still raises it", []step{
			{10 * ms, 2000, 10 * ms}, {200 * ms, 1000, 200 * ms},
		}},
		{"capped", []step{{time.Hour, 0, maxEst}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e estimate
			for k, s := range tt.steps {
				if s.sample >= 0 {
					e = e.sampled(s.sample, s.atMs)
				}
				if got := e.at(s.atMs); !near(got, s.want) {
					t.Fatalf("step %d (sample %v at %d ms): estimate %v, want %v", k, s.sample, s.atMs, got, s.want)
				}
			}
		})
	}
}

// near reports whether got is want within 0.1% (the estimate keeps
// microseconds and decays in floating point).
func near(got, want time.Duration) bool {
	d := got - want
	return d.Abs() <= want/1000+time.Microsecond
}

// newTimedGroup is a group over 3 test nodes (quorum 2) whose node calls
// are bounded by timeout, adapted up to most.
func newTimedGroup(t *testing.T, timeout, most time.Duration) *group {
	g := &group{unheard: []ans{{0, errUnheard}, {1, errUnheard}, {2, errUnheard}}}
	g.Group = New(Config{Nodes: 3, Quorum: 2, Timeout: timeout, MaxTimeout: most, Spawn: func(f func()) { g.bg.Go(f) }})
	t.Cleanup(g.Close)
	return g
}

// calls runs n calls decided by twoOK, one after the other, each with its
// late answers acted on before the next, and returns what each found:
// "ok" or "failed", and the timeout its node calls had.
func (g *group) calls(t *testing.T, f *fakes, n int) (outcomes []string, timeouts []time.Duration, took []time.Duration) {
	t.Helper()
	for range n {
		start := time.Now()
		c := g.run(t, context.Background(), f, twoOK)
		took = append(took, time.Since(start))
		timeouts = append(timeouts, c.deadline.Sub(c.timing.began))
		if twoOK(c.View()) {
			outcomes = append(outcomes, "ok")
		} else {
			outcomes = append(outcomes, "failed")
		}
		without := -1
		for i, h := range c.View().Heard {
			if !h {
				without = i
			}
		}
		g.decidedWithout = append(g.decidedWithout, without)
		c.Rest(nil, nil)
		g.idle(t)
	}
	return outcomes, timeouts, took
}

// Rule 8: every node answering in 120 ms, beyond a 50 ms timeout (a
// machine too busy to schedule the calls): the timeout follows, and calls
// succeed after at most two failures; without adaptation they all fail.
func TestTheTimeoutFollowsNodesThatAllSlow(t *testing.T) {
	tests := []struct {
		name     string
		most     time.Duration
		maxFails int // of 5 calls; the later ones succeed
	}{
		{"adapting up to 500 ms", 500 * ms, 2},
		{"without adaptation", 50 * ms, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, f := newTimedGroup(t, 50*ms, tt.most), newFakes(3)
			f.slow = 120 * ms
			outcomes, timeouts, _ := g.calls(t, f, 5)
			t.Logf("outcomes %v, timeouts %v", outcomes, timeouts)
			fails := 0
			for _, o := range outcomes {
				if o == "failed" {
					fails++
				}
			}
			if fails > tt.maxFails || (tt.maxFails < 5 && outcomes[4] != "ok") {
				t.Fatalf("outcomes %v with timeouts %v; want at most %d failures, the last call ok", outcomes, timeouts, tt.maxFails)
			}
			if tt.maxFails == 5 && fails != 5 {
				t.Fatalf("outcomes %v; want every call failed without adaptation", outcomes)
			}
		})
	}
}

// Rule 8: one node of three hung does not raise the timeout: the calls
// are decided at the quorum's pace, and the hung node's calls end at the
// base timeout.
func TestAHungMinorityDoesNotRaiseTheTimeout(t *testing.T) {
	const base = 200 * ms
	g, f := newTimedGroup(t, base, 2*time.Second), newFakes(3)
	f.gate(t, 2)
	outcomes, timeouts, took := g.calls(t, f, 5)
	t.Logf("outcomes %v, timeouts %v, took %v", outcomes, timeouts, took)
	for k := range outcomes {
		if outcomes[k] != "ok" || timeouts[k] != base || g.decidedWithout[k] != 2 {
			t.Fatalf("call %d: %s in %v without node %d, node calls bounded by %v; want ok without node 2 (the quorum's pace), bounded by %v",
				k, outcomes[k], took[k], g.decidedWithout[k], timeouts[k], base)
		}
	}
	if got := g.Estimate(2); got < base*9/10 || got > base {
		t.Fatalf("the hung node's estimate is %v, want about %v (censored at the timeout)", got, base)
	}
	if got := g.Timeout(); got != base {
		t.Fatalf("timeout %v after the hung node's calls, want %v", got, base)
	}
}

// Rule 8: a hung majority raises the timeout, but never beyond
// MaxTimeout: each call fails within it.
func TestAHungMajorityFailsWithinMaxTimeout(t *testing.T) {
	const base, most = 20 * ms, 200 * ms
	g, f := newTimedGroup(t, base, most), newFakes(3)
	f.gate(t, 1)
	f.gate(t, 2)
	outcomes, timeouts, took := g.calls(t, f, 5)
	t.Logf("outcomes %v, timeouts %v, took %v", outcomes, timeouts, took)
	for k := range outcomes {
		// took has room for a busy machine's scheduling; the bound is
		// what the Group guarantees.
		if outcomes[k] != "failed" || timeouts[k] > most || took[k] > most+time.Second {
			t.Fatalf("call %d: %s in %v, bounded by %v; want failed within %v", k, outcomes[k], took[k], timeouts[k], most)
		}
	}
	if timeouts[0] != base || timeouts[4] != most {
		t.Fatalf("timeouts %v; want from %v up to %v", timeouts, base, most)
	}
}

// Rule 8: once the nodes are quick again, the timeout comes back to the
// base as the slow samples decay; quick answers do not bring it back at
// once.
func TestTheTimeoutComesBackAfterTheSlowness(t *testing.T) {
	g := newTimedGroup(t, 50*ms, 500*ms)
	sec := func(s float64) time.Time { return g.lat.epoch.Add(time.Duration(s * float64(time.Second))) }
	for i := range 3 {
		g.lat.observe(i, 120*ms, sec(1))
	}
	if got := g.timeoutAt(sec(1)); got != 360*ms {
		t.Fatalf("timeout %v while every node answers in 120 ms, want 360ms", got)
	}
	for i := range 3 {
		g.lat.observe(i, ms, sec(1.1)) // quick again
	}
	tests := []struct {
		at   float64 // seconds since the Group was made
		want time.Duration
	}{
		{1.1, 347700 * time.Microsecond}, // 360 ms × 2^(-0.05)
		{3, 180 * ms},                    // a half-life later
		{5, 90 * ms},
		{6, 63640 * time.Microsecond}, // 360 ms × 2^(-2.5)
		{7, 50 * ms},                  // 3 × 15 ms is below the base
		{60, 50 * ms},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("at %vs", tt.at), func(t *testing.T) {
			if got := g.timeoutAt(sec(tt.at)); !nearPct(got, tt.want) {
				t.Fatalf("timeout %v, want %v", got, tt.want)
			}
		})
	}
}

// nearPct reports whether got is want within 1%.
func nearPct(got, want time.Duration) bool { return (got - want).Abs() <= want/100 }

// Rule 8 costs no allocation on a call's path: reading the timeout and
// adding a sample.
func TestTheTimeoutAllocatesNothing(t *testing.T) {
	g := newTimedGroup(t, 50*ms, 500*ms)
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		g.observe(1, now, now.Add(3*ms), now.Add(50*ms), false, false)
		g.timeoutAt(now)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per sample and timeout, want 0", allocs)
	}
}
