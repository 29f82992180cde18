// Package model holds the sequential specifications that porcupine
// (github.com/anishathalye/porcupine) checks the fault suite's histories
// against: a fenced mutex per resource, a fenced semaphore of K permits,
// and the fenced store that the holders write to. A history is
// linearizable against a model when every operation that took effect can
// be given a moment between its invocation and its completion, in an order
// that respects real time, such that the model, run in that order, gives
// the answers the clients saw.
//
// # Operations
//
// An Op is one client call: its kind, the resource (or semaphore, or
// store key) it names, the lease it carries, its invocation and completion
// on the run's one monotonic clock, and what came back: Ok (it took
// effect, with the token and validity answered), Fail (it surely did not:
// a 4xx, a 503, a refused dial, a write the store refused), Unknown (a
// timeout, a cut connection: it may have taken effect or not) or Maybe
// (it may have, but before its answer came). History turns Ops into
// porcupine operations; an Unknown one completes at the end of time, since
// its effect, if any, may land at any moment after it was sent.
//
// # Time in the models
//
// A lease is a promise bounded in time, which a plain register model
// cannot say. Each state carries At, the earliest moment the operations
// linearized so far can all have taken effect: stepping an operation first
// raises At to the operation's invocation (and, where a rule says so, to
// a lease's end), and the step is illegal when At has passed the
// operation's completion. Choosing the earliest moment is never worse
// than a later one, since no rule asks for an earlier moment than At.
//
// # The fenced mutex (Mutex), one partition per resource
//
// The state is the holder (a lease, or none), the holder's token and end,
// and the highest token granted for the resource.
//
//	M0  A definite failure (Fail) changed nothing: it is left out of the
//	    history. A release that failed is the exception: its holder gave
//	    the lock up when it sent it, and a 503 may come after the lease's
//	    copies were deleted on some nodes, so it is stepped as Maybe (as
//	    Unknown, but by its completion); so is a force release answered
//	    503 (M6).
//	M1  An acquire by a lease that does not hold the lock is granted no
//	    earlier than the holder's end: At is raised to the end, and the
//	    grant is illegal if that is after the acquire completed. The end is
//	    the holder's invocation plus the validity the gateway answered
//	    (raised by its extends): the promise is that no one else holds the
//	    lock while the holder's answered validity lasts, counted from when
//	    the holder sent its request, which is no later than the gateway
//	    started counting.
//	M2  A grant to another lease carries a token above every token granted
//	    or answered for the resource before; a grant to the holder's own
//	    lease (an acquire retried, answered 200) a token not below the
//	    holder's.
//	M3  An extend or release that took effect (Ok) names the holder's
//	    lease. After the holder's end, with no grant since, the holder may
//	    still extend or release (the lock lives on the nodes a little
//	    longer than the validity promised); after another lease's grant it
//	    may not. An extend's token is not below the holder's token and
//	    raises the highest token answered; its end is its invocation plus
//	    the validity answered, if later than the holder's end.
//	M4  A release or force release that took effect leaves no holder. A
//	    force release names no lease (M6). Tokens go on from the highest.
//	M5  An Unknown acquire either did nothing or granted its lease with no
//	    validity promised to anyone (the client never learnt of the grant,
//	    so its end is its invocation) and no token known: a later Ok
//	    operation of that lease may rely on it, no other operation is
//	    barred by it. An Unknown release either did nothing or released
//	    the holder's lease (M3, M4). An Unknown extend changed nothing any
//	    client was promised: it is a no-op, left out of the history. The
//	    branch where an unsure operation did nothing leaves At alone.
//	M6  A force release that took effect ends the holder's lease at its
//	    moment, whatever validity the holder was answered: a grant to
//	    another lease after it is not held to the broken holder's end (M1),
//	    and the broken holder's extends and releases after it are not Ok
//	    (M3). It does not lower the tokens (M4): the next grant's is above
//	    the broken one's (M2). A force release answered 503 is stepped as
//	    Maybe (it may have deleted the lock's copies on a majority before
//	    its answer, as a failed release may); one answered 404 (no node of
//	    a quorum held the lock) or refused (401, 403) is left out (M0). A
//	    force release never lets a grant stand beside a holder granted
//	    after it: it acts once, at one moment.
//	M7  An acquire marked Outside (it overlapped a fault outside
//	    lockgate's stated model, such as a node's clock stepped past the
//	    drift allowance, which lets that node forget a lock early) is not
//	    held to the holder's end: M1 does not apply to it; M2 to M6 do.
//	    The fault suite checks each history without the marks first, and
//	    counts apart, without failing, a history that only the marks make
//	    linearizable.
//
// # The fenced semaphore (Semaphore), one partition per permit
//
// K permits, each a fenced mutex of its own (M1 to M5 per permit; a
// permit has no force release), and
// every Ok operation names the permit it took or acted on. Since the
// permits are apart, the history is partitioned by semaphore and permit.
//
//	S1  A permit's index is below K: at most K holders at once.
//	S2  An acquire, extend or release applies M1 to M5 to the permit it
//	    names; tokens grow per permit.
//	S3  An Unknown acquire named no permit (Permit -1) and never took one
//	    that another client saw (the answer that would name it was lost):
//	    it is a no-op, left out of the history.
//
// # The fenced store (Store), one partition per key
//
// The state is the highest token admitted and the lease that wrote it.
//
//	F1  A write is admitted (Ok) only with a token not below the highest
//	    admitted; it becomes the highest.
//	F2  A write is refused (Fail) only with a token below the highest
//	    admitted: a refusal of a token not below it lost a write.
//	F3  A token names one lease: a write admitted with the highest token
//	    comes from the lease that wrote that token first.
//	F4  An Unknown write was admitted (F1) or not.
//
// # What is not checked here
//
// Liveness (that an acquire is granted soon after a fault heals) is C4's,
// and the answers a definite failure gave (a 404 to a holder's release) are
// checker A's. The models trust the clock: a gateway or node whose clock
// runs faster than the drift allowance, or is stepped past it, can break
// M1 without a bug (M7 is how the suite tells such a history apart).
package model
