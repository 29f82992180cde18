package lockcore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Rejoiner is implemented by nodes that come back from a restart of a
// majority at once instead of after a quarantine (rule 8 in the package
// doc): their Check reports NodeHealth.ID, ServedAt, Witnessed and
// Durable, the guard records what it saw with Witness, and a quarantined
// node lends its data to the others' recovery with Lent.
type Rejoiner interface {
	// Witness records, on a node that the last Check found in service and
	// only while the same server process still serves the same data, that
	// a gateway saw it in service now: its ServedAt is raised to at least
	// its clock's milliseconds (and always by one), its durability as
	// that check found it is noted (Durable becomes false for good, until
	// the next Repair, once a check finds it not durable), and each
	// seen[id] is raised into its Witnessed[id]. It never lowers
	// anything. A node that is not in service, or whose process changed,
	// is left as it is.
	Witness(ctx context.Context, seen map[string]int64) error
	// Lent returns a view of the node's data while it stays quarantined
	// with epoch, the Epoch of the check that found it quarantined: its
	// locks and counters as they are (marks or not), for another node's
	// recovery. Every read fails with ErrNodeChanged once the node's
	// epoch is another or another server process answers.
	Lent(epoch string) LentNode
}

// LentNode is a quarantined node's data as Rejoiner.Lent reads it.
type LentNode interface {
	Lister
	Counters(ctx context.Context) ([]int64, error)
}

// checkWitnesses is off only in tests that show what the witnesses catch.
var checkWitnesses atomic.Bool

func init() { checkWitnesses.Store(true) }

// source is a node a recovery reads: its locks and its counters.
type source interface {
	Lister
	Counters(ctx context.Context) ([]int64, error)
}

// rejoins reports whether every node is a Rejoiner and a Lister and node
// i is an Adopter: what a recovery after a restart of a majority needs.
func (g *guard) rejoins(i int) bool {
	if _, ok := g.nodes[i].(Adopter); !ok {
		return false
	}
	for _, n := range g.nodes {
		if _, ok := n.(Rejoiner); !ok {
			return false
		}
		if _, ok := n.(Lister); !ok {
			return false
		}
	}
	return true
}

// whole lists the nodes that res shows whole (rule 8): in service, or
// quarantined after a restart of a durable node (NodeHealth.Durable) whose
// data no other node's witness shows older than it was when last seen in
// service. It is nil unless every node answered its check: the witnesses
// of every node are heard, so that a copy restored on some nodes is
// caught by any node that kept its data.
func whole(res []checkResult) []int {
	var out []int
	for j, c := range res {
		if c.err != nil {
			return nil
		}
		switch {
		case healthError(c.h) == nil:
			out = append(out, j)
		case c.h.Quarantined && !c.h.Lost && c.h.Durable && witnessed(j, res):
			out = append(out, j)
		}
	}
	return out
}

// witnessed reports whether node j's data is as new as every other node
// saw it (rule 8): it has an ID that no other node's data also has, and
// no other node witnessed it served later than its own ServedAt says.
func witnessed(j int, res []checkResult) bool {
	if !checkWitnesses.Load() {
		return true
	}
	h := res[j].h
	if h.ID == "" || h.ServedAt <= 0 {
		return false
	}
	for k, c := range res {
		if k == j || c.err != nil {
			continue
		}
		if c.h.ID == h.ID {
			return false // a copy of j's data answers as another node
		}
		if w, ok := c.h.Witnessed[h.ID]; ok && w > h.ServedAt {
			return false
		}
	}
	return true
}

// rejoinable reports whether quarantined node i can recover now from the
// other whole nodes (rule 8): i is whole itself, and with them makes a
// quorum. Used only when it cannot recover from the nodes in service
// (recoverable).
func (g *guard) rejoinable(i int, res []checkResult) bool {
	if !g.rejoins(i) {
		return false
	}
	w := whole(res)
	return len(w) >= g.r.quorum && slices.Contains(w, i)
}

// sourceOf returns node j as a recovery reads it: itself when in service,
// its Lent view when quarantined.
func (g *guard) sourceOf(j int, res []checkResult) source {
	if healthError(res[j].h) == nil {
		return g.nodes[j].(source)
	}
	return g.nodes[j].(Rejoiner).Lent(res[j].h.Epoch)
}

// rejoin recovers node i from the other whole nodes (rule 8), as recover
// does from the nodes in service: it takes in every lock they hold and
// raises its counters to their highest, and serves only if it read every
// one of them to the end.
func (g *guard) rejoin(ctx context.Context, i int, res []checkResult) error {
	var src []int
	for _, j := range whole(res) {
		if j != i {
			src = append(src, j)
		}
	}
	epoch := res[i].h.Epoch
	floor, read, err := g.recoverFrom(ctx, i, src, epoch, len(src), func(j int) source { return g.sourceOf(j, res) })
	switch {
	case err != nil:
		return err
	case read < len(src):
		return fmt.Errorf("recovery after a restart read %d of the %d other whole nodes it needs; the quarantine goes on", read, len(src))
	}
	rctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	return g.nodes[i].Repair(rctx, floor, epoch)
}

// witness records on every node that res found in service what the pass
// saw of the others in service (Rejoiner.Witness), so that a node later
// back from an older copy of its data is told from one back from a
// restart (rule 8). Failures are left for the next pass.
func (g *guard) witness(ctx context.Context, res []checkResult) {
	seen := map[string]int64{}
	var in []int
	for j, c := range res {
		if c.err != nil || healthError(c.h) != nil {
			continue
		}
		if _, ok := g.nodes[j].(Rejoiner); !ok {
			continue
		}
		in = append(in, j) // one without an ID yet draws it (Witness)
		if c.h.ID != "" {
			seen[c.h.ID] = c.h.ServedAt
		}
	}
	var wg sync.WaitGroup
	for _, j := range in {
		others := maps.Clone(seen)
		delete(others, res[j].h.ID)
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, g.r.checkTimeout())
			defer cancel()
			_ = g.nodes[j].(Rejoiner).Witness(wctx, others)
		})
	}
	wg.Wait()
}

// whyNotWhole says why quarantined node i, back from a restart of a
// durable node, cannot recover with the others (rule 8), for /readyz and
// the 503s: some node does not answer, another node saw its data newer
// than it is now (a restore from an older copy), or too few whole nodes.
func whyNotWhole(i int, res []checkResult, quorum int) string {
	answered := 0
	for _, c := range res {
		if c.err == nil {
			answered++
		}
	}
	switch {
	case answered < len(res):
		return fmt.Sprintf("only %d of the %d nodes answer, and every node's record is needed to tell a restart from a restore (start the nodes that are down)", answered, len(res))
	case !witnessed(i, res):
		return "another node saw its data newer than it is now (it was restored from an older copy): it recovers from the other nodes once enough of them serve"
	}
	return fmt.Sprintf("only %d of the %d nodes are whole, fewer than the %d that hold every lock", len(whole(res)), len(res), quorum)
}
