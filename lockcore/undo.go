package lockcore

import (
	"context"
	"errors"
	"slices"
	"time"
)

// undoAcquire releases what a failed attempt may have taken, so that it does
// not block others until its TTL runs out (a minted lease's releases that
// fail are tried again in the background, see retryUndo):
//   - every node that granted this attempt (it was free before);
//   - when the lease id was minted for this attempt, also every node that did
//     not answer, which may have granted it unheard: such a lease holds
//     nothing else.
//
// A lease id the client chose may already hold the lock from an earlier
// request (a retry whose first answer was lost). Then a node that did not
// answer may hold that earlier lock and is left alone (a copy this attempt
// made there expires with the TTL), and when any node answered Reentered
// nothing is released at all: the lease keeps what it had.
func (r *Redlock) undoAcquire(at attempt, results []nodeResult, reentered bool) {
	if reentered {
		return
	}
	undo := make([]bool, len(results))
	for i, res := range results {
		unheard := res.err != nil && errors.Is(res.err, errUnheard) // undone when it answers (see lateAcquire)
		undo[i] = (res.err == nil && res.reply.Status == StatusGranted) || (res.err != nil && at.minted && !unheard)
	}
	r.undoOn(at, undo)
}

// undoOn releases at's lease on the nodes marked in undo and tells the
// waiting room which released it. A minted lease's releases that failed
// are tried again in the background (see retryUndo), until a later round
// of the same request begins (see attempt.superseded).
func (r *Redlock) undoOn(at attempt, undo []bool) {
	resource, lease := at.Resource, at.LeaseID
	if !slices.Contains(undo, true) || at.superseded() {
		return
	}
	results := r.fanout(context.Background(), func(ctx context.Context, i int, n Node) (NodeReply, error) {
		if !undo[i] {
			return NodeReply{Status: StatusAbsent}, nil
		}
		return n.Release(ctx, resource, lease, 0)
	})
	r.waits.announce(resource, released(results))
	if at.minted {
		var again []bool
		for i, res := range results {
			again = append(again, undo[i] && res.err != nil)
		}
		if slices.Contains(again, true) {
			r.retries.Go(func() { r.retryUndo(resource, lease, again, at.TTL, at.superseded) })
		}
	}
}

// retryUndo keeps releasing a minted lease's copies on the nodes marked in
// again, whose release failed (a lost answer, a cut connection), until each
// answers or the lease's TTL has run out anyway: otherwise a failed attempt
// could leave a lock held on a majority that nobody knows of. Only a minted
// lease may be released late: nobody else can hold it, while a client that
// chose its lease id may have acquired with it meanwhile; and the same
// request may have too, in a later round: it stops once superseded reports
// true (see attempt.superseded). It stops when the Redlock is
// closed.
func (r *Redlock) retryUndo(resource, lease string, again []bool, ttl time.Duration, superseded func() bool) {
	// Real time, like the node calls it retries: this is clean-up that no
	// wait depends on, and a fake clock driving waits must not run it.
	deadline := time.Now().Add(ttl)
	wait := 50 * time.Millisecond
	for slices.Contains(again, true) && time.Now().Add(wait).Before(deadline) {
		t := time.NewTimer(wait)
		select {
		case <-r.guard.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
		if superseded() {
			return
		}
		results := r.fanout(context.Background(), func(ctx context.Context, i int, n Node) (NodeReply, error) {
			if !again[i] {
				return NodeReply{Status: StatusAbsent}, nil
			}
			return n.Release(ctx, resource, lease, 0)
		})
		for i, res := range results {
			again[i] = again[i] && res.err != nil
		}
		r.waits.announce(resource, released(results))
	}
}

// released returns the set of nodes whose release succeeded, as a bit mask.
func released(results []nodeResult) uint64 {
	var mask uint64
	for _, res := range results {
		if res.err == nil && res.reply.Status == StatusOK {
			mask |= 1 << res.i
		}
	}
	return mask
}
