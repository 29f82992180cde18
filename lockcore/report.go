package lockcore

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// report turns check results into states and tells the HealthObserver of
// changes.
func (g *guard) report(res []checkResult) {
	now := g.r.opt.Clock.Now()
	for i, c := range res {
		state, reason, until := NodeServing, "", time.Time{}
		switch h := c.h; {
		case c.err != nil:
			state, reason = NodeUnreachable, c.err.Error()
		case h.Refusing != "":
			state, reason = NodeRefusing, h.Refusing
		case h.Lost && g.recoverable(i, res):
			state, reason, until = NodeLost, h.Reason, now.Add(2*g.r.opt.CheckInterval)
		case h.Lost:
			state, reason, until = NodeLost, h.Reason, now.Add(g.r.quarantine())
		case h.Quarantined && g.recoverable(i, res):
			state, reason, until = NodeQuarantined, "recovering from the other nodes", now.Add(2*g.r.opt.CheckInterval)
		case h.Quarantined:
			until = now.Add(g.r.quarantine() - h.QuarantinedFor)
			state, reason = NodeQuarantined, fmt.Sprintf("too few other nodes in service to recover from; serves again after %s, once no lock it held can be live",
				until.UTC().Format(time.RFC3339))
		case !h.Initialized:
			state = NodeUninitialized
		}
		g.setUntil(i, state, reason, until)
	}
}

// NodeReport is what the node guard last found of one node.
type NodeReport struct {
	// Node names the node (its String: host:port, never a password).
	Node  string
	State NodeState
	// Reason says why the node is not serving (see HealthObserver); it
	// may name the node's address.
	Reason string
	// Since is when the node entered State, on the gateway's clock.
	Since time.Time
	// Until is when the node is expected to serve again: the end of its
	// quarantine, or about two checks while it recovers from the other
	// nodes. Zero when serving or when nothing tells (unreachable,
	// refusing, not initialized).
	Until time.Time
}

// NodeReports reports every node's state as the node guard last found it,
// in the order of the nodes. Before the guard's first pass every state is
// empty.
func (r *Redlock) NodeReports() []NodeReport {
	g := r.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Clone(g.states)
	for i := range out {
		out[i].Node = r.nodes[i].String()
	}
	return out
}

// backIn is how long until a quorum of nodes is expected in service, from
// the guard's last pass (see QuorumError.RetryAfter).
func (g *guard) backIn() time.Duration {
	now := g.r.opt.Clock.Now()
	g.mu.Lock()
	waits := make([]time.Duration, len(g.states))
	for i, st := range g.states {
		switch {
		case st.State == NodeServing:
		case !st.Until.IsZero():
			waits[i] = max(st.Until.Sub(now), 0)
		default:
			waits[i] = time.Second
		}
	}
	g.mu.Unlock()
	slices.Sort(waits)
	return waits[g.r.quorum-1]
}

// noQuorum fills in e's RetryAfter and returns it.
func (r *Redlock) noQuorum(e *QuorumError) *QuorumError {
	e.RetryAfter = r.guard.backIn()
	return e
}

func (g *guard) set(i int, state NodeState, reason string) { g.setUntil(i, state, reason, time.Time{}) }

func (g *guard) setUntil(i int, state NodeState, reason string, until time.Time) {
	g.mu.Lock()
	st := &g.states[i]
	changed := st.State != state
	if changed {
		st.Since = g.r.opt.Clock.Now()
	}
	st.State, st.Reason, st.Until = state, reason, until
	g.mu.Unlock()
	if ho, ok := g.r.opt.Observer.(HealthObserver); ok && changed {
		ho.NodeState(g.nodes[i].String(), state, reason)
	}
}

// healthError is why a node that answered its check does not count as
// ready, or nil.
func healthError(h NodeHealth) error {
	switch {
	case h.Refusing != "":
		return fmt.Errorf("refuses writes: %s", h.Refusing)
	case h.Lost, h.Quarantined, !h.Initialized:
		return ErrQuarantined
	}
	return nil
}

// isQuarantined reports whether err says a node was out of service.
func isQuarantined(err error) bool { return errors.Is(err, ErrQuarantined) }
