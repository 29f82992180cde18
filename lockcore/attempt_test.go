package lockcore_test

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/lockcore"
)

// A round's late answers act on that round alone: the next round of the
// same waiting request may begin while they come, without waiting for
// them when its context has ended (lateLeases.wait returns then), and
// must share nothing with them that it writes. Node 2 is held in the
// first round, which a quorum decides; its answer is let through as the
// second round begins, with a context already canceled. Under -race a
// round state shared between the two (the request's round number, what
// its first round learnt) is reported as a data race.
func TestALateAnswerSharesNothingWithTheNextRound(t *testing.T) {
	c := newEarlyCluster(t, nil)
	mustAcquire(t, c.rl, lockcore.AcquireRequest{Resource: "warm", TTL: earlyTTL}) // the guard's first pass
	for range 3 {
		granted := c.granted(2)
		open := c.gate(2)
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		var l *lockcore.Lease
		var err error
		within(t, "the first round", func() {
			l, err = lockcore.TwoRounds(c.rl, lockcore.AcquireRequest{Resource: "race", TTL: earlyTTL, Wait: earlyTTL}, canceled, func() {
				open()
				<-granted // node 2 answered the first round: a late answer
			})
		})
		if err != nil {
			t.Fatalf("first round: %v", err)
		}
		if l == nil {
			t.Fatal("first round: no lease")
		}
		c.settle() // the second round, its context canceled, undid it
	}
}
