// Package quorum is one call over n nodes in parallel, decided before
// every node has answered: the fan-out, the grace for the nodes still to
// answer, the pace that remembers which nodes are too slow to wait for,
// the timeout that follows the nodes' latency, the goroutines kept for the
// node calls, and the late answers.
//
// # What it needs, what it gives
//
// The package knows nothing of locks, nodes or tokens. A Group is n nodes
// with a quorum; Run calls a function on each of them and reads their
// answers (any type that says whether it Failed) until the caller's
// policy says the answers heard decide the call, then gives the nodes
// still to answer a grace, and returns. The caller reads the answers,
// acts on them, and hands the answers still to come to Rest, which passes
// each to the caller's late function in the background. A nil policy
// waits for every node.
//
// # States of a call
//
// One function, decide, turns a call's state into the next step; Run only
// carries it out.
//
//	phase   condition                                      step
//	any     every node has answered                        stop
//	open    the policy does not hold of the answers heard  read the next answer
//	open    the policy holds                               begin the grace, then decide again
//	grace   no node still to answer is waited for          stop
//	grace   the grace has ended                            expire: every node still to
//	                                                       answer missed it; stop
//	grace   otherwise                                      read the next answer or the
//	                                                       end of the grace
//
// # A node's estimate and the timeout (rule 8)
//
// Each answer updates its node's estimate (sample, then estimate.sampled);
// each call reads the estimates once, as of its start (callTimeout):
//
//	answer                                   sample
//	not a failure                            the time it came after the call began
//	a failure                                the call's deadline after its start
//	a failure, the caller having left        none
//
//	estimate e as of the sample, sample d    estimate becomes
//	d ≥ e                                    d
//	d < e                                    e, halving every halfLife from then
//
//	the quorum-th smallest estimate q        timeout
//	k·q ≤ Timeout                            Timeout
//	Timeout < k·q < MaxTimeout               k·q
//	k·q ≥ MaxTimeout                         MaxTimeout
//
// # The rules
//
//  1. Decided early. Every answer is read until the policy holds; then the
//     call returns without waiting for the other nodes, except for the
//     grace (rule 3). A nil policy reads every answer, and judges none
//     (rule 5).
//  2. The grace's end. A grace that begins at t lasts as long as the call
//     had taken at t, and at least GraceMin (graceFrom). It begins when
//     the quorum-th answer that is not a failure comes, and never ends
//     before a grace begun at the decision would: on a busy machine the
//     caller may notice the quorum's answer well after it came. Failures
//     do not count towards that quorum: a node that fails at once would
//     otherwise end the grace early, and the node the call needs for its
//     quorum would look slow.
//  3. Waiting. A decided call waits, until its grace ends, for the nodes
//     still to answer that are not behind (rule 6); it returns at once
//     when every node still to answer is behind.
//  4. Expiry. When the grace ends, every node still to answer missed it.
//  5. Judging. A call with a policy judges each answer: in time if it came
//     before the grace began, or by its end, whether the call waited for
//     it or had returned already (a late answer); late otherwise. A late
//     answer of a node already judged at the expiry is judged again only
//     if it came in time (it was waiting to be read).
//  6. Pace. A node is behind once it has missed behindAfter graces in a
//     row, until it answers a call in time. Calls are numbered when they
//     start; a judgement of an older call than the newest judged for the
//     node is ignored, so a node's pace follows its newest calls. Only
//     speed is remembered, never an answer: a node that is behind is
//     called as always and its answer counts as soon as it comes.
//  7. Cancellation. While the call is undecided, the caller's context
//     being canceled cancels the calls (a call does not start with a live
//     context once the caller has left). Once Rest is called, the calls
//     still running are no longer tied to the caller: they run to their
//     own deadline, so that their answers can be acted on.
//  8. Deadline. Each node call is bounded, from the start of the call, by
//     the call's timeout, or by the caller's deadline if sooner. The
//     timeout follows the latency the nodes show: k (timeoutFactor, 3)
//     times the quorum-th smallest of the nodes' estimates, never below
//     Timeout nor above MaxTimeout (callTimeout; MaxTimeout not above
//     Timeout: Timeout alone). A node's estimate is a decaying maximum of
//     its samples: it rises at once to a larger sample and halves every
//     halfLife (2 s) since it was set (estimate.sampled). Every answer is
//     a sample, whether read by the call, after it in Rest, or by All: an
//     answer counts as the time it came after the call began; a failure, the
//     time the node was given (censored: no answer came within it),
//     except when the caller's leaving canceled the call (rule 7), which
//     says nothing of the node. The quorum-th smallest, so that a slow,
//     hung or failing minority never raises the timeout: its calls end at
//     the timeout the quorum sets, as with a fixed one; while a machine
//     too busy to schedule the calls promptly, which slows every node,
//     raises it, and calls that a quorum answers slowly succeed. A
//     majority that fails or hangs raises it to MaxTimeout within a few
//     calls (each failure a sample of the whole timeout): such calls fail
//     after MaxTimeout rather than Timeout, the cost of the bound.
//  9. The rest. Rest passes each answer still to come, in the order they
//     come, to the late function on one goroutine (started by
//     Config.Spawn), then calls after; a complete call passes nothing.
//  10. Kept goroutines. Node calls run on goroutines kept between calls, at
//     most MaxKept of them (see callers); with MaxKept 0 each call has a
//     goroutine of its own.
//
// Why the timeout adapts: a fixed bound right for a slow or dead node is
// wrong when every node is alive and the answers wait for a busy CPU;
// calls then fail for want of a quorum although every node answers.
//
// Why a grace, and why pace: without a grace, late answers come with
// nearly every call, and the rare paths that act on them become routine;
// waiting a grace for a node that stays slow would make every call
// slower, so a node that has missed graces is not waited for.
package quorum
