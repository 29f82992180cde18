package lockcore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Clock tells time and sets timers, for everything a Redlock times:
// validity, retry hints, and every wait (its deadline, the retries of a
// waiting Acquire, its pauses). Elapsed time is measured as
// Now().Sub(start), which uses Go's monotonic clock for the real clock;
// tests inject a fake (nodetest.Clock). Node calls are bounded by
// Options.NodeTimeout in real time whatever the clock, and so is the grace
// a round gives the nodes still to answer (see round.until): both measure
// how long the nodes take to answer, which no fake clock governs.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this
	// clock (at once when d <= 0), unless stop is called first; stop
	// reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Options tune a Redlock. A nil *Options or a zero field means the default
// documented on the field.
type Options struct {
	// NodeTimeout bounds each call to one node, from the moment the call
	// is made: time spent waiting in the node's client (package redisnode
	// queues calls behind the round trip in flight and pipelines them)
	// counts. Default 50ms. A call that a quorum has settled does not wait
	// for the other nodes (see the package doc), so a slow or hung minority
	// costs nothing; the bound matters when fewer than a quorum answer in
	// time, and the call then fails with *QuorumError. It must stay far
	// below MinTTL: a lock's validity is its TTL minus the time spent
	// acquiring, which can be as long as NodeTimeout when a majority is
	// slow. On a gateway whose CPU is saturated by other work, calls wait
	// to be scheduled: raise it there rather than see 503s.
	NodeTimeout time.Duration
	// DriftFactor is the share of the TTL set aside for clock drift between
	// nodes; 2 ms are added to it. Default 0.01. A lease's validity is its
	// TTL less the time its acquisition or extension took less this
	// allowance: with the default, a 1 s TTL granted at once is valid for
	// 988 ms.
	DriftFactor float64
	// MinTTL and MaxTTL bound lock TTLs. Defaults 100ms and 1h.
	MinTTL, MaxTTL time.Duration
	// MaxWait bounds how long an Acquire may wait for a held lock. Default 5m.
	MaxWait time.Duration
	// MaxWaiters bounds the Acquire calls waiting at once on this Redlock;
	// past it Acquire returns ErrTooManyWaiters. Default 10000.
	MaxWaiters int
	// Clock is the time source of validity, retry hints and waits, and
	// the timers of waits. Default: the real clock.
	Clock Clock
	// Observer is told of node calls, quorum failures and fencing
	// write-backs, for metrics, and of node state changes if it is a
	// HealthObserver. Default: nobody.
	Observer Observer
	// CheckInterval is how often every node is checked for lost data,
	// refused writes and the end of its quarantine (see the package doc).
	// Default 1s.
	CheckInterval time.Duration
	// UnsafeNoLossProtection turns off the detection, quarantine and repair
	// of nodes that lost data, and the catch-up of lagging counters: the
	// behaviour before they existed, for tests that show what they prevent.
	// Never in production.
	UnsafeNoLossProtection bool
}

func (o *Options) withDefaults() Options {
	var v Options
	if o != nil {
		v = *o
	}
	if v.NodeTimeout <= 0 {
		v.NodeTimeout = 50 * time.Millisecond
	}
	if v.DriftFactor <= 0 {
		v.DriftFactor = 0.01
	}
	if v.MinTTL <= 0 {
		v.MinTTL = 100 * time.Millisecond
	}
	if v.MaxTTL <= 0 {
		v.MaxTTL = time.Hour
	}
	if v.MaxWait <= 0 {
		v.MaxWait = 5 * time.Minute
	}
	if v.MaxWaiters <= 0 {
		v.MaxWaiters = 10000
	}
	if v.Clock == nil {
		v.Clock = realClock{}
	}
	if v.Observer == nil {
		v.Observer = nopObserver{}
	}
	if v.CheckInterval <= 0 {
		v.CheckInterval = time.Second
	}
	return v
}

// Redlock grants locks over a fixed set of independent nodes. It is safe for
// concurrent use. With one node it is a plain single-instance lock.
type Redlock struct {
	nodes  []Node
	quorum int
	opt    Options
	waits  *waitRoom
	calls  []Node // nodes as fanout calls them: reported to opt.Observer
	// id names this Redlock to the nodes (NodeAcquire.Replica): random, not
	// secret.
	id string
	// handOff is true when every node is a HandOffer.
	handOff bool
	guard   *guard
	lates   lateLeases // acquisitions answered with calls still under way
	bg      background // rounds whose late answers are being acted on
	pace    pace       // which nodes the rounds' graces wait for
	callers *callers   // the goroutines that make the rounds' node calls
	// unheard holds, by node, the error a round's result holds until the
	// node answers (errUnheard): made once, shared by every round.
	unheard []error
}

// New returns a Redlock over nodes. It fails with ErrInvalid when there are
// no nodes or the options contradict each other.
func New(nodes []Node, opts *Options) (*Redlock, error) {
	if len(nodes) == 0 || len(nodes) > 63 {
		return nil, &InvalidError{Field: "nodes", Reason: "between 1 and 63 nodes are needed"}
	}
	o := opts.withDefaults()
	if o.MinTTL > o.MaxTTL {
		return nil, &InvalidError{Field: "ttl bounds", Reason: fmt.Sprintf("minimum %v is above maximum %v", o.MinTTL, o.MaxTTL)}
	}
	if o.NodeTimeout*2 > o.MinTTL {
		return nil, &InvalidError{Field: "node timeout", Reason: fmt.Sprintf("%v leaves too little validity for the minimum TTL %v; keep it at most half of it", o.NodeTimeout, o.MinTTL)}
	}
	if o.DriftFactor >= 0.5 {
		return nil, &InvalidError{Field: "drift factor", Reason: "must be below 0.5"}
	}
	r := &Redlock{nodes: slices.Clone(nodes), quorum: len(nodes)/2 + 1, opt: o, id: NewLeaseID()[:16], handOff: true}
	for _, n := range nodes {
		if _, ok := n.(HandOffer); !ok {
			r.handOff = false
		}
		r.unheard = append(r.unheard, &NodeError{Node: n.String(), Err: errUnheard})
	}
	r.waits = newWaitRoom(r)
	r.guard = newGuard(r)
	r.calls = observeNodes(r.nodes, o.Observer)
	r.pace.nodes = make([]atomic.Uint64, len(r.nodes))
	r.pace.graceMin = graceMin
	r.callers = newCallers(maxCallers, !raceBuild)
	return r, nil
}

// MinValidity is the least validity a lease is granted or extended with:
// less is reported as ErrValidityExhausted. The HTTP API counts validity in
// whole milliseconds, so a lease always has at least 1 to report.
const MinValidity = time.Millisecond

// Quorum is the number of nodes that must agree: N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// Nodes returns the nodes in the order they were given.
func (r *Redlock) Nodes() []Node { return slices.Clone(r.nodes) }

// Limits returns the effective TTL and wait bounds.
func (r *Redlock) Limits() (minTTL, maxTTL, maxWait time.Duration) {
	return r.opt.MinTTL, r.opt.MaxTTL, r.opt.MaxWait
}

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Resource string
	// LeaseID is the caller's secret for this lease. Empty: a new one is
	// minted (192 bits from crypto/rand). If the lease already holds the
	// lock, Acquire refreshes its TTL and returns its token (an idempotent
	// retry).
	LeaseID string
	TTL     time.Duration
	// Wait is how long to wait for a lock held by another lease; 0 fails at
	// once with *TakenError.
	Wait time.Duration
	// Owner is a free label shown by Inspect.
	Owner string

	// minted is set when Acquire minted LeaseID: such a lease cannot hold
	// anything from an earlier request.
	minted bool
	// fresh is set when the request's first round showed that the lease did
	// not hold the lock before the request (see mayHold), or, for a request
	// that joined a queue without trying, when its retry check found that
	// the lease holds no quorum (see waitRoom.acquire): a node that says
	// it re-entered then holds a copy from this request's own earlier round
	// (whose answer was lost) or a stray minority copy, and the answer is a
	// new grant. tried is set after the first round.
	fresh, tried bool
	// rounds counts a waiting request's rounds (nil for one that does not
	// wait), and round is the number of the round a copy of the request
	// belongs to (see superseded).
	rounds *atomic.Int64
	round  int64
}

// superseded reports whether a later round of the request has begun since
// the round req is a copy of. A clean-up of that round's copies (undoOn,
// retryUndo) must then stop: the request's lease id is the same in every
// round, so a release sent for the earlier round would free the later
// round's grant (the lease would then answer 404 to its holder).
func (req AcquireRequest) superseded() bool {
	return req.rounds != nil && req.rounds.Load() != req.round
}

// Waits reports whether the request may wait for a held lock.
func (req AcquireRequest) Waits() bool { return req.Wait > 0 }

// Lease is a held lock.
type Lease struct {
	Resource string
	ID       string // the lease id: a secret, never log it
	Token    int64  // the fencing token
	TTL      time.Duration
	// Validity is how long the lock is known to be held from the moment the
	// answer was produced: TTL minus the time spent minus clock drift; at
	// least MinValidity.
	Validity time.Duration
	// Expires is Now()+Validity on the Redlock's clock.
	Expires time.Time
	// Reentered is true when the lease already held the lock (an idempotent
	// retry) and false for a new holder.
	Reentered bool
	Owner     string

	minted bool // the lease id was minted for this acquisition
}

// ExtendRequest extends a held lock.
type ExtendRequest struct {
	Resource string
	LeaseID  string
	TTL      time.Duration // 0: the TTL the lock was last set with
	// IfToken non-zero: fail with ErrTokenMismatch, changing nothing, unless
	// the lock's token is this; checked by each node in the same step as the
	// extend (see Redlock.Extend).
	IfToken int64
}

// ReleaseRequest releases a held lock.
type ReleaseRequest struct {
	Resource string
	LeaseID  string
	// IfToken non-zero: fail with ErrTokenMismatch, changing nothing, unless
	// the lock's token is this; checked by each node in the same step as the
	// release or hand-off (see Redlock.Release).
	IfToken int64
}

// LockInfo describes who holds a lock, without the lease id.
type LockInfo struct {
	Resource  string
	Token     int64
	Owner     string
	TTL       time.Duration
	Remaining time.Duration
	Expires   time.Time
}

// nameBytes and leaseBytes mark the bytes a resource name and a lease id
// may hold. They are checked by a loop rather than a regular expression:
// every request checks both, and regexp matching was about 12 % of the
// handlers' CPU time.
var nameBytes, leaseBytes = func() (name, lease [256]bool) {
	for c := range 256 {
		alnum := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		lease[c] = alnum || c == '_' || c == '-'
		name[c] = lease[c] || c == '.' || c == ':'
	}
	return name, lease
}()

// only reports whether s is minLen to maxLen bytes, each allowed by ok.
func only(s string, minLen, maxLen int, ok *[256]bool) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := range len(s) {
		if !ok[s[i]] {
			return false
		}
	}
	return true
}

// ValidResource reports whether name is a valid resource name: 1 to 200
// characters of A-Z a-z 0-9 . _ - :
func ValidResource(name string) bool { return only(name, 1, 200, &nameBytes) }

// ValidLeaseID reports whether id is a valid lease id: 16 to 128 characters
// of A-Z a-z 0-9 - _
func ValidLeaseID(id string) bool { return only(id, 16, 128, &leaseBytes) }

// ValidOwner reports whether owner is a valid label: at most 256 printable
// characters.
func ValidOwner(owner string) bool {
	n := 0
	for _, c := range owner {
		n++
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == 0xfffd {
			return false
		}
	}
	return n <= 256
}

// NewLeaseID returns a fresh lease id: 192 bits from crypto/rand, base64url.
func NewLeaseID() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (Go ≥1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (r *Redlock) checkResource(name string) error {
	if !ValidResource(name) {
		return &InvalidError{Field: "resource", Reason: "must be 1 to 200 characters of A-Z a-z 0-9 . _ - :"}
	}
	return nil
}

func checkLease(id string) error {
	if !ValidLeaseID(id) {
		return &InvalidError{Field: "lease_id", Reason: "must be 16 to 128 characters of A-Z a-z 0-9 - _"}
	}
	return nil
}

func (r *Redlock) checkTTL(ttl time.Duration) error {
	if ttl < r.opt.MinTTL || ttl > r.opt.MaxTTL {
		return &InvalidError{Field: "ttl_ms", Reason: fmt.Sprintf("must be between %d and %d", r.opt.MinTTL.Milliseconds(), r.opt.MaxTTL.Milliseconds())}
	}
	return nil
}

// checkRequest checks the fields that Acquire, Extend and Release share, in
// one order (resource, lease id, TTL) so that each names the same field
// first. The lease id must be valid, but may be empty with mayMint (Acquire
// mints one). The TTL must lie within the bounds, but may be 0 with
// mayKeepTTL (Extend keeps the TTL last set) and is not looked at with noTTL
// (Release has none).
func (r *Redlock) checkRequest(resource, lease string, ttl time.Duration, relax checkFlags) error {
	if err := r.checkResource(resource); err != nil {
		return err
	}
	if lease != "" || relax&mayMint == 0 {
		if err := checkLease(lease); err != nil {
			return err
		}
	}
	if relax&noTTL == 0 && (ttl != 0 || relax&mayKeepTTL == 0) {
		return r.checkTTL(ttl)
	}
	return nil
}

// checkFlags relax checkRequest.
type checkFlags int

const (
	mayMint    checkFlags = 1 << iota // an empty lease id is accepted
	mayKeepTTL                        // TTL 0 is accepted
	noTTL                             // the TTL is not checked
)

// drift is the clock drift allowance of a lock with this TTL:
// Options.DriftFactor of it plus 2 ms.
func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.opt.DriftFactor) + 2*time.Millisecond
}

// validity is how long a lock set with ttl on the nodes at start is known
// to stand from now: the TTL, less the time since start, less the drift
// allowance. The one definition behind Lease.Validity and
// LockInfo.Remaining; below MinValidity a grant or extension fails.
func (r *Redlock) validity(start, now time.Time, ttl time.Duration) time.Duration {
	return ttl - now.Sub(start) - r.drift(ttl)
}

// Acquire takes the lock on req.Resource, waiting up to req.Wait while
// another lease holds it.
//
// Errors: *InvalidError (ErrInvalid); *TakenError (ErrTaken) when another
// lease holds it after the wait; *QuorumError (ErrNoQuorum) when too few
// nodes answered; ErrTooManyWaiters; ErrClosed; or an error matching
// ctx.Err() when ctx ended first.
func (r *Redlock) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	if err := r.checkRequest(req.Resource, req.LeaseID, req.TTL, mayMint); err != nil {
		return nil, err
	}
	if req.Wait < 0 || req.Wait > r.opt.MaxWait {
		return nil, &InvalidError{Field: "wait_ms", Reason: fmt.Sprintf("must be between 0 and %d", r.opt.MaxWait.Milliseconds())}
	}
	if !ValidOwner(req.Owner) {
		return nil, &InvalidError{Field: "owner", Reason: "must be at most 256 printable characters"}
	}
	if req.LeaseID == "" {
		req.LeaseID, req.minted = NewLeaseID(), true
	}
	if req.Wait == 0 {
		lease, err := r.tryAcquire(ctx, &req)
		return r.handOver(ctx, lease, err)
	}
	return r.waits.acquire(ctx, req)
}

type nodeResult struct {
	i     int
	reply NodeReply
	err   error
	at    time.Time // when the answer came (see pace)
}

// tally counts node results by outcome.
type tally struct {
	ok, taken, absent, mismatch int
	maxToken                    int64
	causes                      []error
	// busy holds, per node that answered, how long until another lease's
	// lock there expires (0 where no other lease holds it).
	busy []time.Duration
}

func count(results []nodeResult, okStatus ...NodeStatus) tally {
	t := tally{busy: make([]time.Duration, 0, len(results))}
	for _, res := range results {
		switch {
		case res.err != nil:
			t.causes = append(t.causes, res.err)
		case slices.Contains(okStatus, res.reply.Status):
			t.ok++
			t.maxToken = max(t.maxToken, res.reply.Token)
		case res.reply.Status == StatusTaken:
			t.taken++
			t.busy = append(t.busy, max(0, res.reply.PTTL))
			continue
		case res.reply.Status == StatusMismatch:
			t.mismatch++
		default:
			t.absent++
		}
		if res.err == nil {
			t.busy = append(t.busy, 0)
		}
	}
	return t
}

// freeIn is how long until a quorum of the nodes that answered is free of
// other leases' locks: the quorum-th shortest remaining TTL. A leftover copy
// of a lock on a minority of nodes does not count.
func (t tally) freeIn(quorum int) time.Duration {
	if len(t.busy) < quorum {
		return slices.Max(append(t.busy, 0))
	}
	b := slices.Clone(t.busy)
	slices.Sort(b)
	return b[quorum-1]
}

func (t tally) answered() int { return t.ok + t.taken + t.absent + t.mismatch }

// tryAcquire is one Redlock round: acquire everywhere, count, fence, or undo.
// The first round of a request records whether the lease may have held the
// lock before it (see AcquireRequest.fresh); later rounds of a waiting
// request keep that.
func (r *Redlock) tryAcquire(ctx context.Context, req *AcquireRequest) (*Lease, error) {
	_ = r.guard.ready(ctx) // before the clock starts; start reports its error
	r.lates.wait(ctx, req.Resource, req.LeaseID)
	if req.rounds != nil {
		req.round = req.rounds.Add(1)
	}
	start := r.opt.Clock.Now()
	na := r.nodeAcquire(*req)
	rd := r.start(ctx, func(ctx context.Context, _ int, n Node) (NodeReply, error) { return n.Acquire(ctx, na) })
	rd.until(func(rd *round) bool { return r.decidedEarly(*req, rd) })
	if !req.tried {
		req.tried, req.fresh = true, !r.mayHold(rd.results)
	}
	lease, err := r.settle(ctx, *req, start, rd.results)
	var ll *lateLease
	if !rd.complete() {
		ll = r.lates.begin(req.Resource, req.LeaseID)
		rd.after = func() { r.lates.end(ll) }
	}
	rd.rest(func(res nodeResult) { r.lateAcquire(*req, lease, ll, res) })
	return lease, err
}

// decidedEarly reports whether the answers heard so far already decide an
// acquisition round: a quorum granted it, or, for a request that does not
// wait, a quorum refused it (held by another lease), so the nodes still to
// answer cannot change the outcome.
// Their answers are acted on when they come (see lateAcquire). A node that
// said it re-entered makes the round wait for every node unless the lease
// is known to have held nothing before the request: whether the lease
// re-entered depends on every answer (see mayHold).
func (r *Redlock) decidedEarly(req AcquireRequest, rd *round) bool {
	ok, taken := 0, 0
	for i, res := range rd.results {
		if !rd.heard[i] || res.err != nil {
			continue
		}
		switch res.reply.Status {
		case StatusGranted:
			ok++
		case StatusReentered:
			if !req.minted && !req.fresh {
				return false
			}
			ok++
		case StatusTaken:
			taken++
		}
	}
	// A waiting request's refusal waits for every node: a node still to
	// answer may grant (the lock was released during the round), and the
	// split vote is what wakes the waiter early, since the release's
	// announcements can come before its queue listens.
	// Nor does a refusal of a lease id the client chose: a late grant to it
	// is left alone (see lateAcquire), and must not outlive the refusal.
	return ok >= r.quorum || (taken >= r.quorum && !req.Waits() && req.minted)
}

// lateAcquire acts on a node's answer to an acquisition round that came
// after the round was decided (see round). For a lease id the client chose,
// it only raises counters (see the code for why); for a minted one:
//   - the round granted lease: a node that granted it with a higher token
//     than the one answered releases that copy (the token was never
//     answered, and every copy of a lease must carry the token its holder
//     was given); a node left with a lower counter or token is raised to
//     the token answered, as catchUp raises the nodes heard; a node that
//     did not answer is raised too, unless it is quarantined;
//   - the round failed after all (fencing failed, or the validity ran out):
//     the late grant is undone as undoAcquire undoes those heard;
//   - the lease was released through this Redlock meanwhile (ll, see
//     lateLease): the release may have reached this node before the grant,
//     so the grant is released.
func (r *Redlock) lateAcquire(req AcquireRequest, lease *Lease, ll *lateLease, res nodeResult) {
	fresh := req.minted || req.fresh
	grant := res.err == nil && (res.reply.Status == StatusGranted || (res.reply.Status == StatusReentered && fresh))
	if !req.minted {
		// A lease id the client chose may be in use by another request at
		// the same time (a retry through another gateway replica): a copy
		// found late may be that request's, so it is left alone, as
		// undoAcquire leaves alone a node that did not answer (a copy this
		// request made there expires with its TTL). Only counters catch up.
		if lease != nil {
			r.catchUpLate(req.Resource, req.LeaseID, lease.Token, res)
		}
		return
	}
	if lease == nil {
		if grant || (res.err != nil && req.minted) {
			again := make([]bool, len(r.nodes))
			again[res.i] = true
			r.undoOn(req, again)
		}
		return
	}
	switch {
	case grant && ll.released.Load():
		// Released meanwhile, maybe before this node granted it. Its
		// counter still catches up.
		r.catchUpLate(req.Resource, req.LeaseID, lease.Token, res)
		r.nodeCall(res.i, func(ctx context.Context, n Node) (NodeReply, error) {
			return n.Release(ctx, req.Resource, req.LeaseID, 0)
		})
	case grant && res.reply.Token > lease.Token:
		r.nodeCall(res.i, func(ctx context.Context, n Node) (NodeReply, error) {
			return n.Release(ctx, req.Resource, req.LeaseID, res.reply.Token)
		})
	default:
		r.catchUpLate(req.Resource, req.LeaseID, lease.Token, res)
	}
}

// catchUpLate is catchUp for a node whose answer came after its round was
// decided with token: a node that answered a lower counter or token, or did
// not answer (unless it is quarantined), is raised.
func (r *Redlock) catchUpLate(resource, lease string, token int64, res nodeResult) {
	if (res.err == nil && res.reply.Token < token) || (res.err != nil && !isQuarantined(res.err)) {
		r.raiseOn(res.i, resource, lease, token)
	}
}

// nodeCall makes one call to node i in the background path of a round's
// late answers, bounded by NodeTimeout.
func (r *Redlock) nodeCall(i int, fn func(ctx context.Context, n Node) (NodeReply, error)) (NodeReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opt.NodeTimeout)
	defer cancel()
	return fn(ctx, r.calls[i])
}

// raiseOn raises node i's counter for resource, and lease's token there,
// to token (see fence).
func (r *Redlock) raiseOn(i int, resource, lease string, token int64) {
	if r.opt.UnsafeNoLossProtection {
		return
	}
	r.nodeCall(i, func(ctx context.Context, n Node) (NodeReply, error) {
		return NodeReply{}, n.RaiseFence(ctx, resource, lease, token)
	})
}

// mayHold reports whether an acquisition round's answers leave room for the
// lease to have held the lock before it: a quorum of nodes either said it
// re-entered or did not answer.
func (r *Redlock) mayHold(results []nodeResult) bool {
	n := 0
	for _, res := range results {
		if res.err != nil || res.reply.Status == StatusReentered {
			n++
		}
	}
	return n >= r.quorum
}

func (r *Redlock) nodeAcquire(req AcquireRequest) NodeAcquire {
	return NodeAcquire{Resource: req.Resource, Lease: req.LeaseID, TTL: req.TTL, Owner: req.Owner,
		Replica: r.id, Waits: req.Wait > 0}
}

// settle decides an acquisition from the nodes' answers to it (an Acquire
// round begun at start, or the grants of a hand-off begun at start): a lease
// when a quorum granted it within its validity, its token fenced on a
// quorum; otherwise an error, after undoing what was granted.
func (r *Redlock) settle(ctx context.Context, req AcquireRequest, start time.Time, results []nodeResult) (*Lease, error) {
	if req.minted || req.fresh {
		// The lease held nothing before this request (a minted id, or see
		// AcquireRequest.fresh): a node that says it re-entered holds a
		// copy this request made, not an earlier hold.
		for i := range results {
			if results[i].err == nil && results[i].reply.Status == StatusReentered {
				results[i].reply.Status = StatusGranted
			}
		}
	}
	t := count(results, StatusGranted, StatusReentered)
	reentered := slices.ContainsFunc(results, func(res nodeResult) bool {
		return res.err == nil && res.reply.Status == StatusReentered
	})

	fail := func(err error) (*Lease, error) {
		r.quorumFailed(err)
		r.undoAcquire(req, results, reentered)
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}

	if t.ok < r.quorum {
		switch {
		case t.answered() < r.quorum:
			return fail(r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.answered(), Causes: t.causes}))
		default:
			return fail(&TakenError{Resource: req.Resource, RetryAfter: t.freeIn(r.quorum), granted: t.ok})
		}
	}
	if t.maxToken <= 0 || t.maxToken > MaxToken {
		return fail(r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.answered(),
			Causes: []error{fmt.Errorf("lockcore: fencing counter out of range: %d", t.maxToken)}}))
	}
	if err := r.fence(ctx, req.Resource, req.LeaseID, t.maxToken, results); err != nil {
		return fail(err)
	}
	now := r.opt.Clock.Now()
	validity := r.validity(start, now, req.TTL)
	if validity < MinValidity {
		return fail(r.noQuorum(&QuorumError{Op: "acquire", Needed: r.quorum, Answered: t.answered(), Causes: []error{ErrValidityExhausted}}))
	}
	return &Lease{
		Resource: req.Resource, ID: req.LeaseID, Token: t.maxToken, TTL: req.TTL,
		Validity: validity, Expires: now.Add(validity), Reentered: reentered, Owner: req.Owner, minted: req.minted,
	}, nil
}

// fence makes sure a majority of nodes hold a fencing counter ≥ token (see
// the package doc for why). Nodes that returned token already do; the others
// are raised before answering when those are fewer than a quorum, and
// otherwise in the background (catchUp), so that no node stays behind.
func (r *Redlock) fence(ctx context.Context, resource, lease string, token int64, results []nodeResult) error {
	have := 0
	for _, res := range results {
		if res.err == nil && res.reply.Token == token && (res.reply.Status == StatusGranted ||
			res.reply.Status == StatusReentered || res.reply.Status == StatusOK) {
			have++
		}
	}
	if have >= r.quorum {
		r.catchUp(resource, lease, token, results)
		return nil
	}
	r.opt.Observer.Fenced()
	rd := r.start(ctx, func(ctx context.Context, _ int, n Node) (NodeReply, error) {
		return NodeReply{Status: StatusOK}, n.RaiseFence(ctx, resource, lease, token)
	})
	rd.until(func(rd *round) bool { return count(rd.results, StatusOK).ok >= r.quorum })
	t := count(rd.results, StatusOK)
	rd.rest(nil) // a raise heard late changed what it had to
	if t.ok < r.quorum {
		return r.noQuorum(&QuorumError{Op: "fence", Needed: r.quorum, Answered: t.ok, Causes: t.causes})
	}
	return nil
}

// catchUp raises, in the background, the counters of the nodes that did not
// answer token: those that answered lower (they missed grants while down or
// slow) and those that did not answer (other than quarantined ones). Left
// behind, such a node would weaken the fencing argument once another node
// loses its data (see the package doc).
func (r *Redlock) catchUp(resource, lease string, token int64, results []nodeResult) {
	if r.opt.UnsafeNoLossProtection {
		return
	}
	for i, res := range results {
		behind := res.err == nil && res.reply.Token < token
		// Nodes still to answer are raised when they answer (see lateAcquire).
		unheard := res.err != nil && !isQuarantined(res.err) && !errors.Is(res.err, errUnheard)
		if !behind && !unheard {
			continue
		}
		go r.raiseOn(i, resource, lease, token)
	}
}

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
func (r *Redlock) undoAcquire(req AcquireRequest, results []nodeResult, reentered bool) {
	if reentered {
		return
	}
	undo := make([]bool, len(results))
	for i, res := range results {
		unheard := res.err != nil && errors.Is(res.err, errUnheard) // undone when it answers (see lateAcquire)
		undo[i] = (res.err == nil && res.reply.Status == StatusGranted) || (res.err != nil && req.minted && !unheard)
	}
	r.undoOn(req, undo)
}

// undoOn releases req's lease on the nodes marked in undo and tells the
// waiting room which released it. A minted lease's releases that failed
// are tried again in the background (see retryUndo), until a later round
// of the same request begins (see AcquireRequest.superseded).
func (r *Redlock) undoOn(req AcquireRequest, undo []bool) {
	resource, lease := req.Resource, req.LeaseID
	if !slices.Contains(undo, true) || req.superseded() {
		return
	}
	results := r.fanout(context.Background(), func(ctx context.Context, i int, n Node) (NodeReply, error) {
		if !undo[i] {
			return NodeReply{Status: StatusAbsent}, nil
		}
		return n.Release(ctx, resource, lease, 0)
	})
	r.waits.announce(resource, released(results))
	if req.minted {
		var again []bool
		for i, res := range results {
			again = append(again, undo[i] && res.err != nil)
		}
		if slices.Contains(again, true) {
			go r.retryUndo(resource, lease, again, req.TTL, req.superseded)
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
// true (see AcquireRequest.superseded). It stops when the Redlock is
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

// Extend resets a held lock's TTL on a majority of nodes. With IfToken, each
// node extends only if the lock's token there is IfToken, in the same atomic
// step (no separate read first); nodes that disagree with a quorum that
// matched are extended as without IfToken (see checked).
//
// Errors: *InvalidError; ErrTokenMismatch; ErrNotHeld; *HeldByOtherError
// (ErrHeldByOther); *QuorumError (ErrNoQuorum); or an error matching
// ctx.Err().
func (r *Redlock) Extend(ctx context.Context, req ExtendRequest) (*Lease, error) {
	if err := r.checkRequest(req.Resource, req.LeaseID, req.TTL, mayKeepTTL); err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx) // before the clock starts; fanout reports its error
	start := r.opt.Clock.Now()
	results := r.checked(ctx, req.IfToken, func(ctx context.Context, _ int, n Node, ifToken int64) (NodeReply, error) {
		return n.Extend(ctx, req.Resource, req.LeaseID, req.TTL, ifToken)
	}, r.matched, func(res nodeResult, token int64) {
		// A node that extended late, or not at all, catches up with the
		// token answered, as catchUp raises those heard.
		r.catchUpLate(req.Resource, req.LeaseID, token, res)
	})
	t := count(results, StatusOK)
	if err := r.verdict("extend", req.Resource, t); err != nil {
		return nil, withCtx(ctx, err)
	}
	token := t.maxToken
	if req.IfToken != 0 && tokenHeld(results, req.IfToken) >= r.quorum {
		// A quorum extended the lease under the token the client named:
		// that is its token. A node whose copy carries a higher one (a
		// late grant to a lease id the client chose, which lateAcquire
		// leaves alone) was extended without the check, and must not
		// change the holder's token under it: the next If-Match would
		// then fail on every node while the lease holds the lock.
		token = req.IfToken
	}
	// The token answered must be fenced like an acquisition's: a lease can
	// hold a quorum without its grant having been fenced (an attempt whose
	// answers were lost left its copies), and the token its nodes store
	// may then be one a later grant repeats.
	if err := r.fence(ctx, req.Resource, req.LeaseID, token, results); err != nil {
		r.quorumFailed(err)
		return nil, withCtx(ctx, err)
	}
	ttl := req.TTL
	if ttl == 0 {
		// The TTL each node last set; should they differ (an earlier
		// extend reached only some), the shortest is what the quorum is
		// sure of.
		for _, res := range results {
			if res.err == nil && res.reply.Status == StatusOK && (ttl == 0 || res.reply.TTL < ttl) {
				ttl = res.reply.TTL
			}
		}
	}
	now := r.opt.Clock.Now()
	validity := r.validity(start, now, ttl)
	if validity < MinValidity {
		r.opt.Observer.QuorumFailed("extend")
		return nil, r.noQuorum(&QuorumError{Op: "extend", Needed: r.quorum, Answered: t.answered(), Causes: []error{ErrValidityExhausted}})
	}
	return &Lease{Resource: req.Resource, ID: req.LeaseID, Token: token, TTL: ttl,
		Validity: validity, Expires: now.Add(validity), Reentered: true}, nil
}

// tokenHeld counts the nodes that answered StatusOK with token.
func tokenHeld(results []nodeResult, token int64) int {
	n := 0
	for _, res := range results {
		if res.err == nil && res.reply.Status == StatusOK && res.reply.Token == token {
			n++
		}
	}
	return n
}

// Release frees a held lock on every node and wakes this replica's waiters;
// when one waits, it passes the lock straight to it instead, if the nodes
// allow it (see HandOffer): the next holder then needs no acquire round of
// its own. A lock that a waiter on another replica was refused is not passed
// on, and this replica's waiters let the other replica's try first. IfToken
// is checked by each node in the same atomic step as the release or
// hand-off, as Extend checks it; a refused release hands nothing on.
//
// Errors: *InvalidError; ErrTokenMismatch; ErrNotHeld; *HeldByOtherError
// (ErrHeldByOther); *QuorumError (ErrNoQuorum) when too few nodes answered
// to be sure the lease no longer holds a majority (retrying is safe); or an
// error matching ctx.Err().
func (r *Redlock) Release(ctx context.Context, req ReleaseRequest) error {
	if err := r.checkRequest(req.Resource, req.LeaseID, 0, noTTL); err != nil {
		return err
	}
	r.lates.release(req.Resource, req.LeaseID)
	if r.handOff {
		if next := r.waits.claim(req.Resource, req.LeaseID); next != nil {
			return r.handOffTo(ctx, req, next)
		}
	}
	results := r.checked(ctx, req.IfToken, func(ctx context.Context, _ int, n Node, ifToken int64) (NodeReply, error) {
		return n.Release(ctx, req.Resource, req.LeaseID, ifToken)
	}, r.matched, func(res nodeResult, _ int64) {
		// A node that released late is announced as those heard are; one
		// that did not answer keeps its copy until its TTL runs out, as
		// when the release waits for it and it fails. The quorum's
		// announcement does not cover it: a waiter here that needs this
		// node (its last attempt began after that announcement and no
		// node granted it) hears of its release from nobody else when the
		// node is no Watcher or the queue's subscription to it failed; and
		// a Wanted that only this node reports is yielded to only here
		// (TestALateReleaseIsActedOn).
		if res.err == nil && res.reply.Status == StatusOK {
			if res.reply.Wanted {
				r.waits.yield(req.Resource)
			}
			r.waits.announce(req.Resource, 1<<res.i)
		}
	})
	t := count(results, StatusOK)
	if wanted(results) {
		r.waits.yield(req.Resource)
	}
	r.waits.announce(req.Resource, released(results))
	if err := r.verdict("release", req.Resource, t); err != nil {
		return withCtx(ctx, err)
	}
	return nil
}

// wanted reports whether a node released a lock that had been refused to
// another replica (NodeReply.Wanted).
func wanted(results []nodeResult) bool {
	return slices.ContainsFunc(results, func(res nodeResult) bool {
		return res.err == nil && res.reply.Status == StatusOK && res.reply.Wanted
	})
}

// handOffTo releases req's lease and, in the same step on each node, grants
// the lock to next, the head of this replica's queue (see HandOffer). The
// grants are settled like an Acquire round begun when the hand-off began:
// next gets a lease with its token fenced as for any acquisition, or its
// grants are undone and it is woken to try by itself. The release is
// judged as Release judges it, whatever became of the grant.
//
// It is decided at the first quorum when the nodes heard both released the
// lock (none refusing If-Match) and granted it to next, as decidedEarly
// decides an acquisition: the answers still to come are then acted on as
// an acquisition's late answers are (see lateAcquire), and a node that
// released without passing the lock on is announced. Otherwise it waits
// for every node.
//
// The hand-off runs to its end even if ctx ends: next's answer depends on it.
func (r *Redlock) handOffTo(ctx context.Context, req ReleaseRequest, next *waiter) error {
	hctx := context.WithoutCancel(ctx)
	_ = r.guard.ready(ctx)                                  // before the clock starts; fanout reports its error
	r.lates.wait(hctx, next.req.Resource, next.req.LeaseID) // see lateLease
	// The hand-off is a round of the waiter's request (see
	// AcquireRequest.superseded).
	if next.req.rounds != nil {
		next.req.round = next.req.rounds.Add(1)
	}
	start := r.opt.Clock.Now()
	h := &handOff{r: r, req: req, next: next, na: r.nodeAcquire(next.req),
		grants: make([]NodeReply, len(r.nodes)), settled: make(chan struct{})}
	results := r.checked(hctx, req.IfToken, h.call, h.early, h.late)
	g := h.grantsOf(results)
	var handed uint64
	for _, res := range g {
		if handedOn(res) {
			handed |= 1 << res.i
		}
	}
	freed := released(results) &^ handed // released without passing it on: announced
	if handed != 0 {
		h.lease, h.err = r.settle(hctx, next.req, start, g)
	} else {
		h.err = ErrNotHeld // nothing was granted, so nothing to undo
	}
	if n := unheard(results); n > 0 {
		h.pending.Store(int32(n))
		h.ll = r.lates.begin(next.req.Resource, next.req.LeaseID)
	}
	close(h.settled)
	if h.err != nil && wanted(results) {
		r.waits.yield(req.Resource)
	}
	r.waits.deliver(next, h.lease, h.err, freed != 0) // a lease for a waiter that left is released
	r.waits.announce(req.Resource, freed)
	if err := r.verdict("release", req.Resource, count(results, StatusOK)); err != nil {
		return withCtx(ctx, err)
	}
	return nil
}

// handOff is one hand-off under way (see Redlock.handOffTo): the release of
// req's lease, which grants the lock to next on each node.
type handOff struct {
	r      *Redlock
	req    ReleaseRequest
	next   *waiter
	na     NodeAcquire
	grants []NodeReply // by node, written by its call before it answers
	view   round       // early's view of the grants heard, reused

	// Set before settled is closed, for the late answers.
	lease   *Lease
	err     error
	ll      *lateLease
	settled chan struct{}
	pending atomic.Int32 // late answers still to act on
}

func (h *handOff) call(ctx context.Context, i int, n Node, ifToken int64) (NodeReply, error) {
	rel, got, err := n.(HandOffer).HandOff(ctx, h.req.LeaseID, ifToken, h.na)
	h.grants[i] = got
	return rel, err
}

// grantsOf returns the grants of the nodes that answered the release in
// results, with the release's errors.
func (h *handOff) grantsOf(results []nodeResult) []nodeResult {
	g := make([]nodeResult, len(results))
	for i, res := range results {
		g[i] = h.grant(res)
	}
	return g
}

func (h *handOff) grant(res nodeResult) nodeResult {
	g := nodeResult{i: res.i, err: res.err}
	if res.err == nil {
		g.reply = h.grants[res.i]
	}
	return g
}

// early decides the hand-off once the nodes heard both released the lock
// (see Redlock.matched) and granted it to next (see Redlock.decidedEarly).
func (h *handOff) early(rd *round) bool {
	if !h.r.matched(rd) {
		return false
	}
	if h.view.results == nil {
		h.view.results = make([]nodeResult, len(rd.results))
	}
	for i, res := range rd.results {
		h.view.results[i] = h.grant(res)
	}
	h.view.heard = rd.heard
	return h.r.decidedEarly(h.next.req, &h.view)
}

// late acts on a node's answer that came after the hand-off was decided: a
// node that released without passing the lock on is announced, and its
// grant is acted on as an acquisition's late answer is (see lateAcquire).
func (h *handOff) late(res nodeResult, _ int64) {
	<-h.settled
	g := h.grant(res)
	if res.err == nil && res.reply.Status == StatusOK && !handedOn(g) {
		h.r.waits.announce(h.req.Resource, 1<<res.i)
	}
	h.r.lateAcquire(h.next.req, h.lease, h.ll, g)
	if h.pending.Add(-1) == 0 {
		h.r.lates.end(h.ll)
	}
}

// handedOn reports whether a node's answer to a hand-off granted the lock
// to the next holder.
func handedOn(grant nodeResult) bool {
	s := grant.reply.Status
	return grant.err == nil && (s == StatusGranted || s == StatusReentered)
}

// unheard counts the nodes whose answer a decided round had not heard.
func unheard(results []nodeResult) int {
	n := 0
	for _, res := range results {
		if res.err != nil && errors.Is(res.err, errUnheard) {
			n++
		}
	}
	return n
}

// checked fans call out to every node with ifToken, the token an Extend or
// Release expects (If-Match, 0 for none), which each node checks in the
// same atomic step as the operation (see Node.Extend).
//
// The nodes of a lock may disagree on its token for a while: a node that
// missed the raise of a lease's token (see fence) stores a lower one until
// catchUp raises it, and a node whose answer to the grant was lost may
// store a higher one. The token a quorum holds is the lock's token. So
// when ifToken is set and a quorum matched it, the nodes that answered
// StatusMismatch are called again without the check (the lease id alone
// decides there, as without If-Match), so that a genuine holder's extend
// or release reaches them too. Mismatch answers that, with the matching
// ones, make a quorum refuse the request (see verdict); fewer are judged
// as if If-Match had not been given.
//
// A node whose stored token is lagging behind the quorum's acts on an
// ifToken equal to that lower token while the others refuse it: the
// request then fails with ErrTokenMismatch, but that minority's copy was
// extended or released. Only a client that sends an older token of the
// same lease (one it had before re-acquiring with the same lease id) sees
// this, and the lock still stands on the quorum.
//
// The round is decided as soon as early reports true of the answers heard
// (nil: once every node has answered); the answers still to come are then
// passed to late with the token the quorum answered (see round). A late
// StatusMismatch is first called again without the check, as above; one
// heard in the round's grace period is called again before checked
// returns, as when every node answered.
func (r *Redlock) checked(ctx context.Context, ifToken int64, call func(ctx context.Context, i int, n Node, ifToken int64) (NodeReply, error), early func(rd *round) bool, late func(res nodeResult, token int64)) []nodeResult {
	rd := r.start(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) { return call(ctx, i, n, ifToken) })
	rd.until(early)
	results := rd.results
	if rd.complete() {
		rd.rest(nil)
	} else {
		// Decided by a quorum that matched: a node that answers later with a
		// mismatch is called again without the check, as below.
		token := count(results, StatusOK).maxToken
		rd.rest(func(res nodeResult) {
			if ifToken != 0 && res.err == nil && res.reply.Status == StatusMismatch {
				res.reply, res.err = r.nodeCall(res.i, func(ctx context.Context, n Node) (NodeReply, error) { return call(ctx, res.i, n, 0) })
			}
			late(res, token)
		})
	}
	t := count(results, StatusOK)
	if ifToken == 0 || t.ok < r.quorum || t.mismatch == 0 {
		return results
	}
	again := r.fanout(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) {
		if res := results[i]; res.err != nil || res.reply.Status != StatusMismatch {
			return NodeReply{}, nil // kept as it was
		}
		return call(ctx, i, n, 0)
	})
	for i, res := range results {
		if res.err == nil && res.reply.Status == StatusMismatch {
			results[i] = again[i]
		}
	}
	return results
}

// matched decides an extend or release round (see checked) once a quorum
// of the nodes heard did it and none refused it for another token: the
// nodes still to answer cannot change the verdict (see verdict), and a
// mismatch, which may still turn into a success, waits for every node.
func (r *Redlock) matched(rd *round) bool {
	ok := 0
	for i, res := range rd.results {
		switch {
		case !rd.heard[i] || res.err != nil:
		case res.reply.Status == StatusMismatch:
			return false
		case res.reply.Status == StatusOK:
			ok++
		}
	}
	return ok >= r.quorum
}

// verdict turns an extend or release tally into nil or the error to return.
//
// "Not held" and "held by other" are answered only when the lease cannot
// hold a quorum: the nodes that confirmed it plus those that did not answer
// (a node whose answer was lost, or one not yet checked after a restart,
// may still have the lock) are fewer than a quorum. Otherwise the outcome
// is unknown: a *QuorumError (503; retrying is safe).
//
// Nodes that found another token than If-Match refuse the request with
// ErrTokenMismatch when, with those that matched, they make a quorum:
// otherwise the lock is not held by a quorum at all, and the answer is what
// it would be without If-Match.
func (r *Redlock) verdict(op, resource string, t tally) error {
	switch {
	case t.ok >= r.quorum:
		return nil
	case t.answered() < r.quorum || t.ok+len(t.causes) >= r.quorum:
		r.opt.Observer.QuorumFailed(op)
		return r.noQuorum(&QuorumError{Op: op, Needed: r.quorum, Answered: t.answered(), Causes: t.causes})
	case t.mismatch > 0 && t.ok+t.mismatch >= r.quorum:
		return ErrTokenMismatch
	case t.taken > 0:
		return &HeldByOtherError{Resource: resource, RetryAfter: t.freeIn(r.quorum)}
	default:
		return ErrNotHeld
	}
}

// ended returns ctx's error, or context.DeadlineExceeded once its deadline
// has passed even if its timer has not fired yet: a node's socket deadline,
// set from the same deadline, can end a call first, and a lease must not
// be given to a caller whose deadline has passed.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func withCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}

// Inspect reports who holds the lock: the lease that holds it on a majority
// of nodes. The lease id is not reported.
//
// Errors: *InvalidError; ErrNotHeld; *QuorumError (ErrNoQuorum); or an error
// matching ctx.Err().
func (r *Redlock) Inspect(ctx context.Context, resource string) (*LockInfo, error) {
	if err := r.checkResource(resource); err != nil {
		return nil, err
	}
	_ = r.guard.ready(ctx) // before the clock starts; fanout reports its error
	start := r.opt.Clock.Now()
	locks := make([]NodeLock, len(r.nodes))
	rd := r.start(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) {
		l, err := n.Inspect(ctx, resource)
		locks[i] = l
		return NodeReply{}, err
	})
	// A lease that a quorum of the nodes heard holds decides; later answers
	// cannot change that. The locks of nodes not heard are not read.
	heldAt := func(i int) bool { return rd.heard[i] && rd.results[i].err == nil && locks[i].Found }
	rd.until(func(rd *round) bool { return quorumHolds(r.quorum, locks, heldAt) })
	results := rd.results
	rd.rest(nil)
	var causes []error
	byLease := map[string][]NodeLock{}
	for i, res := range results {
		if res.err != nil {
			causes = append(causes, res.err)
			continue
		}
		if heldAt(i) {
			byLease[locks[i].Lease] = append(byLease[locks[i].Lease], locks[i])
		}
	}
	if answered := len(r.nodes) - len(causes); answered < r.quorum {
		r.opt.Observer.QuorumFailed("inspect")
		return nil, withCtx(ctx, r.noQuorum(&QuorumError{Op: "inspect", Needed: r.quorum, Answered: answered, Causes: causes}))
	}
	for _, held := range byLease {
		if len(held) < r.quorum {
			continue
		}
		info := r.lockInfo(resource, held, start, r.opt.Clock.Now())
		return &info, nil
	}
	return nil, ErrNotHeld
}

// quorumHolds reports whether one lease holds quorum of locks, counting only
// the nodes i for which held(i).
func quorumHolds(quorum int, locks []NodeLock, held func(i int) bool) bool {
	for i := range locks {
		n := 0
		for j := range locks {
			if held(i) && held(j) && locks[j].Lease == locks[i].Lease {
				n++
			}
		}
		if n >= quorum {
			return true
		}
	}
	return false
}

// Ready returns nil when a quorum of nodes is in service: each answers its
// check, accepts writes, has its data whole and is not quarantined (see
// Node.Check). Otherwise it returns a *QuorumError whose causes say what is
// wrong with each other node (a *NodeError wrapping ErrQuarantined, a
// refusal of writes, or the check's error). It checks every node now (a
// check may write to the node); LastReady answers from the guard's last
// pass instead.
func (r *Redlock) Ready(ctx context.Context) error {
	if err := r.guard.ready(ctx); err != nil {
		return r.noQuorum(&QuorumError{Op: "check", Needed: r.quorum, Causes: []error{err}})
	}
	res := r.guard.check(ctx)
	r.guard.report(res)
	return r.readiness(res)
}

// LastReady is Ready as of the node guard's last pass over the nodes (one
// every Options.CheckInterval), so that it costs the nodes nothing: a
// readiness probe asked often, by anyone, must not write to every node at
// every call. When the last pass is older than two check intervals and a
// check's timeout (the guard is stuck in a long repair, say), it checks
// the nodes as Ready does.
func (r *Redlock) LastReady(ctx context.Context) error {
	if err := r.guard.ready(ctx); err != nil {
		return r.noQuorum(&QuorumError{Op: "check", Needed: r.quorum, Causes: []error{err}})
	}
	res, at := r.guard.lastPass()
	if res == nil || time.Since(at) > 2*r.opt.CheckInterval+r.checkTimeout() {
		return r.Ready(ctx)
	}
	return r.readiness(res)
}

// readiness is Ready's answer for the check results res.
func (r *Redlock) readiness(res []checkResult) error {
	var causes []error
	for i, c := range res {
		err := c.err
		if err == nil {
			err = healthError(c.h)
		}
		if err != nil {
			if c.err == nil && (c.h.Lost || !c.h.Initialized) {
				r.guard.poke()
			}
			causes = append(causes, &NodeError{Node: r.nodes[i].String(), Err: err})
		}
	}
	if ok := len(r.nodes) - len(causes); ok < r.quorum {
		r.opt.Observer.QuorumFailed("check")
		return r.noQuorum(&QuorumError{Op: "check", Needed: r.quorum, Answered: ok, Causes: causes})
	}
	return nil
}

// quarantine is how long a node that lost data stays out of service before
// it is repaired: longer than any lock it held can have lived on (the
// largest TTL, its drift allowance and a node call).
func (r *Redlock) quarantine() time.Duration {
	return r.opt.MaxTTL + r.drift(r.opt.MaxTTL) + r.opt.NodeTimeout
}

// checkTimeout bounds one node's Check.
func (r *Redlock) checkTimeout() time.Duration { return max(4*r.opt.NodeTimeout, 250*time.Millisecond) }

// Close ends every wait in progress with ErrClosed, stops checking the
// nodes and lets go of the goroutines kept for node calls (up to 256 stay
// parked between calls until then). Later Acquire calls with a wait fail
// with ErrClosed; other calls still work (their node calls on goroutines
// that are not kept), but a node that loses data after Close is no longer
// found. Close may be called more than once.
func (r *Redlock) Close() {
	r.waits.close()
	r.guard.close()
	r.callers.close()
}
