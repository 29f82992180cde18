package lockcore

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Lister is implemented by nodes whose held locks can be listed. Listing is
// an operator's tool: it reads, never changes, and works in bounded steps.
type Lister interface {
	// ScanLocks takes one bounded step of a walk over the locks this node
	// holds on resources whose names start with prefix, examining about
	// count entries. cursor is "" to start and the returned next to go on;
	// next is "" once the walk is over. A lock held for the whole walk is
	// returned at least once; one taken or released during it may or may
	// not be. Taking the same step again (the same cursor) returns at least
	// the names it returned before that are still held.
	ScanLocks(ctx context.Context, prefix, cursor string, count int) (resources []string, next string, err error)
	// InspectLocks reads several locks in one round trip: one NodeLock per
	// resource, in the order given (Found false where nothing holds it).
	InspectLocks(ctx context.Context, resources []string) ([]NodeLock, error)
}

// ForceReleaser is implemented by nodes that can break a lock whoever holds
// it.
type ForceReleaser interface {
	// BreakLock replaces the lock on resource, whatever lease holds it (or
	// none), by a hold of lease for ttl, in one atomic step: no other
	// lease can take the lock while the hold lasts, and a grant to the
	// broken lease that arrives later is refused as any other. It
	// announces nothing (the hold's Release does). It returns the token the
	// replaced lock carried (0: none was held) and the fencing counter of
	// the resource's slot, which is at least every token the node granted
	// on it before the step.
	BreakLock(ctx context.Context, resource, lease string, ttl time.Duration) (broken, counter int64, err error)
}

// ErrNotSupported means a node of this Redlock lacks an optional capability
// (Lister, ForceReleaser) that the call needs.
var ErrNotSupported = errors.New("lockcore: a node does not support this operation")

// List bounds.
const (
	// DefaultListLimit is the page size of List when limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
	// listScanCount is the COUNT hint of one node scan step. A Redis node
	// also keeps its FenceSlots counters (16,384 keys), which every scan
	// walks past: a step takes a good share of them.
	listScanCount = 2000
	// listStepsPerPage bounds the scan steps one List call takes: with
	// listScanCount, a page examines at most about 32,000 keys per
	// scanned node before it returns, full or not, with a cursor.
	listStepsPerPage = 16
)

// ListPage is one page of held locks.
type ListPage struct {
	// Locks are held by a quorum of nodes, each as Inspect reports it
	// (never with its lease id).
	Locks []LockInfo
	// Next is the cursor of the next page, "" when the listing is over. A
	// page may hold fewer than the limit asked for, even none, while Next
	// is not "": only an empty Next ends a listing.
	Next string
}

// listCursor is where a listing stands: scanning node Node from its own
// cursor Scan, with the names up to After of that step already examined.
// Skipped holds the nodes whose scan failed: a lock they hold is listed
// through the next scanned node that holds it.
type listCursor struct {
	Prefix  string `json:"p"`
	Node    int    `json:"n"`
	Scan    string `json:"c,omitempty"`
	After   string `json:"a,omitempty"`
	Skipped uint64 `json:"s,omitempty"`
}

var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{0,200}$`)

func (c listCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s, prefix string, nodes int) (listCursor, error) {
	bad := &InvalidError{Field: "cursor", Reason: "is not a next_cursor of a listing with this prefix"}
	if s == "" {
		return listCursor{Prefix: prefix}, nil
	}
	if len(s) > 2048 {
		return listCursor{}, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listCursor{}, bad
	}
	var c listCursor
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.Prefix != prefix || c.Node < 0 || c.Node >= nodes ||
		c.Skipped>>nodes != 0 || (c.After != "" && !ValidResource(c.After)) || len(c.Scan) > 200 {
		return listCursor{}, bad
	}
	return c, nil
}

// List returns a page of the locks held on resources whose names start with
// prefix ("" for all), at most limit of them (0: DefaultListLimit), from
// where cursor ("" to start; a ListPage.Next to go on) left off.
//
// A lock is listed when a quorum of the nodes that answer hold it for the
// same lease, as Inspect decides; its lease id never leaves lockcore. The
// nodes are scanned one after another, only as many as needed for every
// quorum to include one of them (N-quorum+1 when all answer); a lock is
// listed at the first scanned node that holds it for that lease, so a lock
// held for the whole listing appears on exactly one page, unless a node's
// own scan returns it twice (Redis may, when it resizes its tables during
// the walk). A lock taken or released during the listing may or may not
// appear. A node whose scan fails is skipped (the next node is scanned in
// its place) for the rest of the listing, so a lock a quorum holds is
// still listed; one listed through that node on an earlier page may then
// appear again. A Redis Cluster node fails its scan while one of its slots
// migrates (redisnode.ClusterNode.ScanLocks).
//
// Each call is bounded: at most listStepsPerPage scan steps on one node at a
// time, each examining about listScanCount keys, and one InspectLocks per
// node per step. Pages are not sorted across steps.
//
// Errors: *InvalidError (prefix, limit, cursor); ErrNotSupported when a node
// is not a Lister; *QuorumError when too few nodes answer; or an error
// matching ctx.Err().
func (r *Redlock) List(ctx context.Context, prefix string, limit int, cursor string) (*ListPage, error) {
	limit, listers, err := r.listArgs(prefix, limit)
	if err != nil {
		return nil, err
	}
	c, err := decodeCursor(cursor, prefix, len(r.nodes))
	if err != nil {
		return nil, err
	}
	page := &ListPage{Locks: []LockInfo{}}
	for steps := 0; steps < listStepsPerPage; steps++ {
		if r.listed(c) {
			return page, nil
		}
		var done bool
		if c, done, err = r.listStep(ctx, listers, limit, c, page); err != nil {
			return nil, err
		}
		if done {
			return page, nil
		}
	}
	page.Next = c.encode()
	return page, nil
}

// listStep takes one scan step of the listing at c, on node c.Node, and
// adds what it lists to page, up to limit locks in all. It returns where
// the listing stands after it, and done when page is complete: full (its
// Next set), or the listing over.
func (r *Redlock) listStep(ctx context.Context, listers []Lister, limit int, c listCursor, page *ListPage) (listCursor, bool, error) {
	sctx, cancel := context.WithTimeout(ctx, r.nodeTimeout())
	names, next, err := listers[c.Node].ScanLocks(sctx, c.Prefix, c.Scan, listScanCount)
	cancel()
	if err != nil {
		c, err = r.skipNode(ctx, c, err)
		return c, false, err
	}
	// The step's names are examined in order; a full page stops within
	// it, and the next page takes the same step again, past the last name
	// examined.
	examined, full := stepNames(names, c.After, limit-len(page.Locks))
	infos, err := r.inspectMany(ctx, listers, examined, c)
	if err != nil {
		return c, false, err
	}
	page.Locks = append(page.Locks, infos...)
	if full && len(examined) > 0 {
		c.After = examined[len(examined)-1]
		if len(page.Locks) < limit {
			return c, false, nil // a page not filled by the names examined: take the step again past them
		}
		page.Next = c.encode()
		return c, true, nil
	}
	c = c.past(next)
	return c, r.listed(c), nil
}

// stepNames returns the names of a scan step to examine, at most room of
// them: sorted, once each, valid and after after. full reports that room
// cut them short (or just fitted them).
func stepNames(names []string, after string, room int) (examined []string, full bool) {
	slices.Sort(names)
	names = slices.Compact(names)
	names = slices.DeleteFunc(names, func(n string) bool { return n <= after || !ValidResource(n) })
	if len(names) >= room {
		return names[:room], true
	}
	return names, false
}

// past is c once its scan step is done, next being the node's cursor
// after it: the node's next step, or the next node's first when the
// node's walk is over.
func (c listCursor) past(next string) listCursor {
	c.Scan, c.After = next, ""
	if next == "" {
		c.Node++
	}
	return c
}

// listArgs checks List's prefix and limit, and returns the limit to use and
// every node as a Lister.
func (r *Redlock) listArgs(prefix string, limit int) (int, []Lister, error) {
	if !prefixPattern.MatchString(prefix) {
		return 0, nil, &InvalidError{Field: "prefix", Reason: "must be at most 200 characters of A-Z a-z 0-9 . _ - :"}
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return 0, nil, &InvalidError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	listers := make([]Lister, len(r.nodes))
	for i, n := range r.nodes {
		l, ok := n.(Lister)
		if !ok {
			return 0, nil, ErrNotSupported
		}
		listers[i] = l
	}
	return limit, listers, nil
}

// listed reports whether the listing at c is over: every quorum includes
// one of the first N-quorum+1 nodes that were scanned, so past them (and
// the skipped ones) there is nothing left to list.
func (r *Redlock) listed(c listCursor) bool {
	return c.Node > len(r.nodes)-r.quorum+bits.OnesCount64(c.Skipped) || c.Node >= len(r.nodes)
}

// skipNode moves the listing at c past its node, whose scan failed with
// err, or returns the error List returns: ctx's, or a *QuorumError once no
// quorum can agree on anything (the listing would be empty for want of
// nodes, not of locks).
func (r *Redlock) skipNode(ctx context.Context, c listCursor, err error) (listCursor, error) {
	if ctx.Err() != nil {
		return c, withCtx(ctx, &NodeError{Node: r.nodes[c.Node].String(), Err: err})
	}
	c = listCursor{Prefix: c.Prefix, Node: c.Node + 1, Skipped: c.Skipped | 1<<c.Node}
	if failed := bits.OnesCount64(c.Skipped); failed > len(r.nodes)-r.quorum {
		r.opt.Observer.QuorumFailed("list")
		return c, withCtx(ctx, r.noQuorum(&QuorumError{Op: "list", Needed: r.quorum, Answered: len(r.nodes) - failed,
			Causes: []error{&NodeError{Node: r.nodes[c.Node-1].String(), Err: err}}}))
	}
	return c, nil
}

// inspectMany reads names on every node and returns, in the order of names,
// those held by a quorum for one lease and held by no earlier scanned node
// than c.Node for that lease (those were listed there).
func (r *Redlock) inspectMany(ctx context.Context, listers []Lister, names []string, c listCursor) ([]LockInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	start := r.opt.Clock.Now()
	views := make([][]NodeLock, len(r.nodes))
	results := r.fanout(ctx, func(ctx context.Context, i int, _ Node) (NodeReply, error) {
		v, err := listers[i].InspectLocks(ctx, names)
		if err == nil && len(v) != len(names) {
			err = fmt.Errorf("lockcore: %d locks read for %d names", len(v), len(names))
		}
		views[i] = v
		return NodeReply{}, err
	})
	var causes []error
	for _, res := range results {
		if res.err != nil {
			causes = append(causes, res.err)
			views[res.i] = nil
		}
	}
	if answered := len(r.nodes) - len(causes); answered < r.quorum {
		r.opt.Observer.QuorumFailed("list")
		return nil, withCtx(ctx, r.noQuorum(&QuorumError{Op: "list", Needed: r.quorum, Answered: answered, Causes: causes}))
	}
	now := r.opt.Clock.Now()
	var out []LockInfo
	for k, name := range names {
		if locks := r.listedHere(views, k, c); locks != nil {
			out = append(out, r.lockInfo(name, locks, start, now))
		}
	}
	return out, nil
}

// listedHere returns the copies of the lock on names[k] (views[i][k] for
// node i) held by a quorum for one lease, when c.Node is the first scanned
// node, not skipped, that holds it; nil when no quorum holds it, or when it
// is listed (or to be listed) through another node.
func (r *Redlock) listedHere(views [][]NodeLock, k int, c listCursor) []NodeLock {
	for _, held := range holders(views, k) {
		if len(held) < r.quorum {
			continue
		}
		if firstUnskipped(held, c.Skipped) != c.Node {
			return nil
		}
		locks := make([]NodeLock, len(held))
		for j, i := range held {
			locks[j] = views[i][k]
		}
		return locks
	}
	return nil
}

// holders groups, by lease, the nodes i whose view views[i][k] holds the
// lock (a nil views[i] did not answer).
func holders(views [][]NodeLock, k int) map[string][]int {
	byLease := map[string][]int{}
	for i, v := range views {
		if v != nil && v[k].Found {
			byLease[v[k].Lease] = append(byLease[v[k].Lease], i)
		}
	}
	return byLease
}

// firstUnskipped returns the first of nodes (in order) not in the bit set
// skipped, or -1.
func firstUnskipped(nodes []int, skipped uint64) int {
	for _, i := range nodes {
		if skipped&(1<<i) == 0 {
			return i
		}
	}
	return -1
}

// agreedToken returns the token of a lease's copies held (at least quorum
// of them): the highest token that quorum copies carry, and true; when no
// token is on quorum copies, the quorum-th highest, and false. The holder
// was answered the token its granting quorum carries once step 3 raised
// it: a copy above it is a late grant that is being given back (a minority
// of the copies), one below it a copy the raise has not reached; so the
// token on a quorum is the holder's, and the highest copy, which the
// lease's holder may never be answered, is not reported. Copies that
// agree on no token are a grant between its answers and its raise: the
// caller reads again (Inspect), or reports the quorum-th highest.
func agreedToken(held []NodeLock, quorum int) (int64, bool) {
	tokens := make([]int64, len(held))
	for i, l := range held {
		tokens[i] = l.Token
	}
	slices.Sort(tokens)
	for i := len(tokens) - 1; i >= quorum-1; i-- {
		if tokens[i] == tokens[i-quorum+1] {
			return tokens[i], true
		}
	}
	return tokens[len(tokens)-quorum], false
}

// lockInfo describes a lock from the copies of the quorum that holds it,
// read in a round begun at start (Inspect, List). The lock stands while a
// quorum of nodes still holds it: for as long as the quorum-th longest
// remaining TTL, that is the validity of the lock's TTL less what of it had
// run out on that node when it answered.
func (r *Redlock) lockInfo(resource string, held []NodeLock, start, now time.Time) LockInfo {
	slices.SortFunc(held, func(a, b NodeLock) int { return cmp.Compare(b.Remaining, a.Remaining) })
	info := LockInfo{Resource: resource}
	info.Token, _ = agreedToken(held, r.quorum)
	for _, l := range held {
		info.TTL = max(info.TTL, l.TTL)
		if info.Owner == "" {
			info.Owner = l.Owner
		}
	}
	ranOut := info.TTL - held[r.quorum-1].Remaining
	info.Remaining = max(0, r.validity(start, now, info.TTL)-ranOut)
	info.Expires = now.Add(info.Remaining)
	info.Granted = now.Add(-ranOut)
	return info
}

// ForceRelease breaks the lock on resource, whatever lease holds it,
// announces the release to this replica's waiters as Release does, and
// returns the broken lock's fencing token (the highest a node held). It is
// an operator's tool to break a stuck lock; the broken holder's lease is
// not told, and its writes are stopped only by fencing.
//
// The next holder's token is above every token the broken lease was or
// will be answered (rules FR1–FR4 in doc.go): the lock is first replaced on
// every node by a hold of the force release's own (BreakLock), which no
// grant can pass, so that a grant to the broken lease still in flight
// either was made before (and the node's counter covers its token) or is
// refused; then every node's counter for the resource's slot is raised to
// the highest counter read (to the clock floor when a node did not
// answer, since its counter is unknown), and the holds are released only
// once the broken lease's round cannot count a grant any longer
// (MaxNodeTimeout after the break): a force release takes that long. A
// gateway that dies on the way leaves the holds to expire (forceHold plus
// twice MaxNodeTimeout).
//
// Errors: *InvalidError; ErrNotHeld when no node held the lock;
// ErrNotSupported when a node is not a ForceReleaser; *QuorumError
// (ErrNoQuorum) when too few nodes answered a step (retrying is safe; the
// holds placed last until forceHold); or an error matching ctx.Err().
func (r *Redlock) ForceRelease(ctx context.Context, resource string) (int64, error) {
	if err := r.checkResource(resource); err != nil {
		return 0, err
	}
	for _, n := range r.nodes {
		if _, ok := n.(ForceReleaser); !ok {
			return 0, ErrNotSupported
		}
	}
	hold, began := NewLeaseID(), time.Now()
	holdFor := forceHold + 2*r.opt.MaxNodeTimeout // the raise and FR4's wait fit well within
	counters := make([]int64, len(r.nodes))       // each written before its node's answer
	broke := r.fanout(ctx, func(ctx context.Context, i int, _ Node) (NodeReply, error) {
		tok, counter, err := r.nodes[i].(ForceReleaser).BreakLock(ctx, resource, hold, holdFor)
		if err != nil {
			return NodeReply{}, err
		}
		counters[i] = counter
		return NodeReply{Status: StatusOK, Token: tok}, nil
	})
	brokeAt := time.Now()
	t := count(broke, StatusOK)
	if t.ok < r.quorum {
		r.opt.Observer.QuorumFailed("force")
		return 0, withCtx(ctx, r.noQuorum(&QuorumError{Op: "force", Needed: r.quorum, Answered: t.answered(), Causes: t.causes}))
	}
	var floor int64
	for i, res := range broke {
		if res.err == nil {
			floor = max(floor, counters[i])
		}
	}
	if t.ok < len(r.nodes) {
		floor = max(floor, clockFloor(time.Now()))
	}
	if floor > 0 {
		raised := count(r.fanout(ctx, func(ctx context.Context, i int, n Node) (NodeReply, error) {
			return NodeReply{Status: StatusOK}, n.RaiseFence(ctx, resource, hold, floor)
		}), StatusOK)
		if raised.ok < r.quorum || time.Since(began) > holdFor/2 {
			r.opt.Observer.QuorumFailed("force")
			return 0, withCtx(ctx, r.noQuorum(&QuorumError{Op: "force", Needed: r.quorum, Answered: raised.ok, Causes: raised.causes}))
		}
	}
	// FR4: a round of the broken lease counts only the grants its node
	// calls returned, and a node call lasts MaxNodeTimeout at most: until
	// that long after the break, such a round may still be granted a node
	// it counts.
	select {
	case <-time.After(time.Until(brokeAt.Add(r.opt.MaxNodeTimeout + forceMargin))):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	freed := r.fanout(ctx, func(ctx context.Context, _ int, n Node) (NodeReply, error) {
		return n.Release(ctx, resource, hold, 0)
	})
	r.waits.announce(resource, released(freed))
	if tok := maxBroken(broke); tok > 0 {
		return tok, nil
	}
	return 0, ErrNotHeld
}

// forceHold, plus twice MaxNodeTimeout, bounds how long a force release's
// holds block the lock: long enough for its raise round and the wait of
// rule FR4, short enough that a gateway that dies in a force release
// leaves the lock blocked for seconds. forceMargin is what FR4's wait adds for the gateways' clocks.
const (
	forceHold   = 10 * time.Second
	forceMargin = 10 * time.Millisecond
)

// maxBroken returns the highest token a BreakLock replaced (0: none).
func maxBroken(results []nodeResult) int64 {
	var tok int64
	for _, res := range results {
		if res.err == nil {
			tok = max(tok, res.reply.Token)
		}
	}
	return tok
}
