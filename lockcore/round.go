package lockcore

import (
	"context"
	"errors"
	"time"

	"github.com/lockgate/lockgate/lockcore/internal/quorum"
)

// errUnheard stands, in a round's results, for a node that has not
// answered yet when the round was decided: its call may still run.
var errUnheard = errors.New("lockcore: no answer yet")

// A round is one quorum call over the nodes (package quorum): every node
// is called in parallel, the round is decided as soon as the answers heard
// decide it, and the answers still to come are acted on in the background
// (round.Rest). The package doc of quorum states its rules: the grace for
// late nodes, which nodes are too slow to wait for, cancellation.
type round = quorum.Call[nodeResult]

// view is what a round's policy looks at: the answers heard so far.
type view = quorum.View[nodeResult]

// nodeFunc is one node call of a round: node i (n) as the round calls it.
type nodeFunc func(ctx context.Context, i int, n Node) (NodeReply, error)

// answerAtQuorum switches early answers on: acquisitions, hand-offs,
// extends, releases, fencing write-backs and reads are answered at the
// first quorum (see quorum.Run and Redlock.checked). Off, every round hears
// every node (up to the node timeout) and no answer comes late: the way to
// tell whether a finding of the fault suite (package chaos) comes from
// early answers.
const answerAtQuorum = true

// maxCallers is how many goroutines a Redlock keeps for node calls (see
// quorum.Config.Kept): room for every node call of 64 rounds over 3 nodes
// (192) in flight at once, and some more. Race builds keep none: handing
// a call to a kept goroutine orders what that goroutine did before (an
// earlier request's node call) before the new request's later steps, and
// the race detector would no longer see a race between the two requests.
const maxCallers = 256

// quorumConfig is the configuration of r's quorum calls.
func (r *Redlock) quorumConfig(graceMin time.Duration, kept int) quorum.Config {
	return quorum.Config{Nodes: len(r.nodes), Quorum: r.quorum, Timeout: r.opt.NodeTimeout,
		MaxTimeout: r.opt.MaxNodeTimeout, GraceMin: graceMin, Kept: kept, Spawn: r.spawn}
}

// nodeTimeout is what a node call made now is given: the rounds' timeout,
// which follows the nodes' latency from NodeTimeout up to MaxNodeTimeout
// (quorum, rule 8). Single-node calls outside a round (fencing catch-ups,
// a listing's scans, the guard's checks) use it too: they meet the same
// nodes on the same busy machine.
func (r *Redlock) nodeTimeout() time.Duration { return r.q.Timeout() }

// NodeTimeout returns the bound a node call made now is given: between
// Options.NodeTimeout and MaxNodeTimeout, following the latency the nodes
// show (see Options.MaxNodeTimeout). It changes no answer; it is for
// metrics.
func (r *Redlock) NodeTimeout() time.Duration { return r.nodeTimeout() }

// spawn runs f on a goroutine counted by r.bg.
func (r *Redlock) spawn(f func()) {
	r.bg.add()
	go func() {
		defer r.bg.done()
		f()
	}()
}

// call calls fn on every node and returns once decided reports true of
// the answers heard (nil: once every node has answered) and the nodes
// still to answer have had their grace. Before the first call it waits for
// the guard's first pass over the nodes (see guard.ready); if that fails,
// the round is complete at once, every node answering the error. The
// caller must call Rest on the round.
func (r *Redlock) call(ctx context.Context, fn nodeFunc, decided func(view) bool) *round {
	if err := r.guard.ready(ctx); err != nil {
		return quorum.Answered(failAll(r.nodes, err))
	}
	if !answerAtQuorum {
		decided = nil
	}
	ctx, span := startRoundSpan(ctx, len(r.nodes), r.quorum)
	rd := quorum.Run(ctx, r.q, r.unheard, func(ctx context.Context, i int) nodeResult {
		n := r.calls[i]
		ctx, nspan := startNodeSpan(ctx, i)
		rep, err := fn(ctx, i, n)
		endNodeSpan(nspan, err)
		if err != nil {
			err = r.callError(i, n, err)
		}
		return nodeResult{i: i, reply: rep, err: err}
	}, decided)
	endRoundSpan(span, rd.View())
	return rd
}

// callError is what a round's result holds for node i (n) whose call
// failed with err: a *NodeError, once the guard is told of a node that
// reports itself quarantined.
func (r *Redlock) callError(i int, n Node, err error) error {
	if isQuarantined(err) {
		r.guard.suspect(i)
	}
	return &NodeError{Node: n.String(), Err: err}
}

// failAll returns the results of a round that fails at once: every node
// answers err.
func failAll(nodes []Node, err error) []nodeResult {
	results := make([]nodeResult, len(nodes))
	for i, n := range nodes {
		results[i] = nodeResult{i: i, err: &NodeError{Node: n.String(), Err: err}}
	}
	return results
}

// fanout calls fn on every node in parallel, each bounded by the node
// timeout,
// and returns the results indexed by node once every node has answered.
func (r *Redlock) fanout(ctx context.Context, fn nodeFunc) []nodeResult {
	rd := r.call(ctx, fn, nil)
	rd.Rest(nil, nil)
	return rd.Answers()
}

// unheardResults returns, by node, what a round's result holds until the
// node answers (errUnheard).
func unheardResults(nodes []Node) []nodeResult {
	out := make([]nodeResult, len(nodes))
	for i, n := range nodes {
		out[i] = nodeResult{i: i, err: &NodeError{Node: n.String(), Err: errUnheard}}
	}
	return out
}

// keptCallers is how many goroutines a Redlock keeps for node calls:
// maxCallers, none in a race build.
func keptCallers() int {
	if raceBuild {
		return 0
	}
	return maxCallers
}
