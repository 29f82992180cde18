package lockcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"time"
)

// report turns check results into states and tells the HealthObserver of
// changes.
func (g *guard) report(res []checkResult) {
	now := g.r.opt.Clock.Now()
	for i, c := range res {
		state, reason, until := NodeServing, "", time.Time{}
		cause := ""
		switch h := c.h; {
		case c.err != nil:
			state, reason, cause = NodeUnreachable, c.err.Error(), "its check failed: "+Cause(c.err)
		case h.Refusing != "":
			state, reason = NodeRefusing, h.Refusing
		case h.Lost && g.recoverable(i, res):
			state, reason, until = NodeLost, h.Reason, now.Add(2*g.r.opt.CheckInterval)
		case h.Lost:
			state, reason, until = NodeLost, h.Reason, now.Add(g.r.quarantine())
		case h.Quarantined && g.recoverable(i, res):
			state, reason, until = NodeQuarantined, "recovering from the other nodes", now.Add(2*g.r.opt.CheckInterval)
		case h.Quarantined && g.rejoinable(i, res):
			state, reason, until = NodeQuarantined, "back from a restart: recovering with the other nodes that restarted", now.Add(2*g.r.opt.CheckInterval)
		case h.Quarantined && h.Durable && g.rejoins(i):
			until = now.Add(g.r.quarantine() - h.QuarantinedFor)
			state, reason = NodeQuarantined, fmt.Sprintf("back from a restart, but %s; serves again after %s, once no lock it held can be live",
				whyNotWhole(i, res, g.r.quorum), until.UTC().Format(time.RFC3339))
		case h.Quarantined:
			until = now.Add(g.r.quarantine() - h.QuarantinedFor)
			state, reason = NodeQuarantined, fmt.Sprintf("too few other nodes in service to recover from (it needs %d of the other %d: "+
				"restart or add nodes one at a time, each once the one before serves)%s; serves again after %s, once no lock it held can be live",
				recoverNeed(len(g.nodes), g.r.quorum), len(g.nodes)-1, notDurable(g, i), until.UTC().Format(time.RFC3339))
		case !h.Initialized:
			state = NodeUninitialized
		}
		g.setUntil(i, state, reason, cause, until)
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
	// Cause is why an unreachable node does not serve, without its
	// address or any other detail of its configuration (see Cause):
	// "its check failed: connection refused". Empty in other states.
	Cause string
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

func (g *guard) set(i int, state NodeState, reason, cause string) {
	g.setUntil(i, state, reason, cause, time.Time{})
}

func (g *guard) setUntil(i int, state NodeState, reason, cause string, until time.Time) {
	g.mu.Lock()
	st := &g.states[i]
	changed := st.State != state
	if changed {
		st.Since = g.r.opt.Clock.Now()
	}
	st.State, st.Reason, st.Cause, st.Until = state, reason, cause, until
	g.mu.Unlock()
	if ho, ok := g.r.opt.Observer.(HealthObserver); ok && changed {
		ho.NodeState(g.nodes[i].String(), state, reason)
	}
}

// Cause names what err, a failed call to a node, says of the connection,
// in words that hold no address, host name or password, so that anyone
// may be shown them: "connection refused", "connection reset", "no answer
// within the node timeout (i/o timeout)", "connection closed", "host
// unreachable", "network unreachable", "host name not found", or, for
// anything else, "an error (the gateway's log has it)".
func Cause(err error) string {
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.As(err, &dns):
		return "host name not found"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "no answer within the node timeout (i/o timeout)"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return "connection closed"
	}
	return "an error (the gateway's log has it)"
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

// notDurable says, for a quarantined node that a restart of a majority
// could bring back (rule 8) but for its persistence, why it cannot.
func notDurable(g *guard, i int) string {
	if !g.rejoins(i) {
		return ""
	}
	return ", and it may have lost writes it acknowledged (it is not on appendonly with appendfsync always, or its quarantine was not for a restart), so no restart of a majority brings it back at once"
}
