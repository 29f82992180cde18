package memnode

import (
	"context"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// Readers-writer locks (lockcore.RWNode). Each hold is an entry like a
// lock's, named lockcore.RWHoldResource(name, mode, lease), so that the
// sweeper expires it and ScanLocks, InspectLocks and AdoptLocks list and
// take it in as any lock (rule R6 of lockcore's doc); n.rw indexes the
// holds by lock name, kept by add, drop and the sweeper. A waiting
// writer's mark is not a hold: it lives in n.marks, is not listed, and is
// lost with the data (it serves fairness only).

var _ lockcore.RWNode = (*Node)(nil)

// mark is a waiting writer's mark on a name (rule R4).
type mark struct {
	lease string
	until time.Time
}

// markPruneMin is the number of marks past which setting one drops the
// expired ones: marks of writers that went away would otherwise stay for
// names never touched again.
const markPruneMin = 64

// indexRW adds e to n.rw when it is a readers-writer hold. n.mu must be
// held.
func (n *Node) indexRW(e *entry) {
	name, excl, lease, ok := lockcore.ParseRWHold(e.name)
	if !ok {
		return
	}
	e.rwName, e.rwExcl, e.rwLease = name, excl, lease
	if n.rw[name] == nil {
		n.rw[name] = map[*entry]struct{}{}
	}
	n.rw[name][e] = struct{}{}
}

// unindexRW takes e out of n.rw. n.mu must be held.
func (n *Node) unindexRW(e *entry) {
	if e.rwName == "" {
		return
	}
	delete(n.rw[e.rwName], e)
	if len(n.rw[e.rwName]) == 0 {
		delete(n.rw, e.rwName)
	}
}

// holds returns the live holds on name, dropping expired ones. n.mu must
// be held.
func (n *Node) holds(name string) []*entry {
	now := n.now()
	var out []*entry
	for e := range n.rw[name] {
		if !now.Before(e.expires) {
			n.drop(e)
			continue
		}
		out = append(out, e)
	}
	return out
}

// liveMark returns name's wait mark if it is live. n.mu must be held.
func (n *Node) liveMark(name string) (mark, bool) {
	m, ok := n.marks[name]
	if ok && !n.now().Before(m.until) {
		delete(n.marks, name)
		return mark{}, false
	}
	return m, ok
}

// conflicts reports whether another hold in hs excludes h (a writer
// against any other hold), which only adopted copies that disagree make.
func conflicts(h *entry, hs []*entry) bool {
	for _, g := range hs {
		if g != h && (h.rwExcl || g.rwExcl) {
			return true
		}
	}
	return false
}

// RWAcquire implements lockcore.RWNode.
func (n *Node) RWAcquire(ctx context.Context, req lockcore.NodeRWAcquire) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, err
	}
	now := n.now()
	hs := n.holds(req.Name)
	var own, other *entry // the lease's hold in the mode asked, in the other mode
	var longest time.Duration
	for _, h := range hs {
		switch {
		case h.rwLease == req.Lease && h.rwExcl == req.Exclusive:
			own = h
		case h.rwLease == req.Lease:
			other = h
		}
		longest = max(longest, h.expires.Sub(now))
	}
	switch {
	case own != nil && !conflicts(own, hs):
		own.ttl = req.TTL
		n.expireAt(own, now.Add(req.TTL))
		return lockcore.NodeReply{Status: lockcore.StatusReentered, Token: own.token}, nil
	case own != nil: // adopted copies that disagree: held for neither here
		return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: longest}, nil
	case other != nil:
		return lockcore.NodeReply{Status: lockcore.StatusMismatch, Token: other.token}, nil
	}
	m, marked := n.liveMark(req.Name)
	free := len(hs) == 0
	if !req.Exclusive {
		free = true
		for _, h := range hs {
			free = free && !h.rwExcl
		}
		if marked && m.lease != req.Lease {
			free = false
			longest = max(longest, m.until.Sub(now))
		}
	}
	if free {
		slot := lockcore.FenceSlot(req.Name)
		n.counters[slot]++
		tok := n.counters[slot]
		n.add(&entry{name: lockcore.RWHoldResource(req.Name, req.Exclusive, req.Lease), lease: req.Lease,
			token: tok, owner: req.Owner, ttl: req.TTL, expires: now.Add(req.TTL)})
		if marked && m.lease == req.Lease {
			delete(n.marks, req.Name)
		}
		return lockcore.NodeReply{Status: lockcore.StatusGranted, Token: tok}, nil
	}
	if req.Exclusive && req.Waits && req.Mark > 0 && (!marked || m.lease == req.Lease) {
		if len(n.marks) >= markPruneMin {
			for k, v := range n.marks {
				if !now.Before(v.until) {
					delete(n.marks, k)
				}
			}
		}
		n.marks[req.Name] = mark{lease: req.Lease, until: now.Add(req.Mark)}
	}
	return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: longest}, nil
}

// RWExtend implements lockcore.RWNode.
func (n *Node) RWExtend(ctx context.Context, name, lease string, ttl time.Duration) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, err
	}
	now := n.now()
	hs := n.holds(name)
	for _, h := range hs {
		if h.rwLease != lease {
			continue
		}
		if conflicts(h, hs) {
			return lockcore.NodeReply{Status: lockcore.StatusTaken, PTTL: h.expires.Sub(now)}, nil
		}
		if ttl > 0 {
			h.ttl = ttl
		}
		n.expireAt(h, now.Add(h.ttl))
		return lockcore.NodeReply{Status: lockcore.StatusOK, Token: h.token, TTL: h.ttl}, nil
	}
	return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
}

// RWRelease implements lockcore.RWNode.
func (n *Node) RWRelease(ctx context.Context, name, lease string) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeReply{}, err
	}
	if m, ok := n.marks[name]; ok && m.lease == lease {
		delete(n.marks, name)
	}
	reply := lockcore.NodeReply{Status: lockcore.StatusAbsent}
	for _, h := range n.holds(name) {
		if h.rwLease == lease {
			n.drop(h)
			reply = lockcore.NodeReply{Status: lockcore.StatusOK, Token: max(reply.Token, h.token)}
		}
	}
	return reply, nil
}

// RWRaise implements lockcore.RWNode.
func (n *Node) RWRaise(ctx context.Context, name, lease string, token int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return err
	}
	if slot := lockcore.FenceSlot(name); n.counters[slot] < token {
		n.counters[slot] = token
	}
	for _, h := range n.holds(name) {
		if h.rwLease == lease && h.token < token {
			h.token = token
		}
	}
	return nil
}

// RWInspect implements lockcore.RWNode.
func (n *Node) RWInspect(ctx context.Context, name string) (lockcore.NodeRW, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeRW{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil {
		return lockcore.NodeRW{}, err
	}
	now := n.now()
	var v lockcore.NodeRW
	for _, h := range n.holds(name) {
		v.Holds = append(v.Holds, lockcore.NodeRWHold{Exclusive: h.rwExcl, NodeLock: lockcore.NodeLock{Found: true,
			Lease: h.rwLease, Token: h.token, Owner: h.owner, TTL: h.ttl, Remaining: h.expires.Sub(now)}})
	}
	_, v.Waiting = n.liveMark(name)
	return v, nil
}
