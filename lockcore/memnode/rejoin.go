package memnode

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

var _ lockcore.Rejoiner = (*Node)(nil)

// rejoinState is what a restart of a majority needs of a node (rule 8 of
// lockcore's doc), kept with the data but for proc, which stands for the
// server process and changes with every Restart.
type rejoinState struct {
	id        string           // lockcore.NodeHealth.ID
	servedAt  int64            // lockcore.NodeHealth.ServedAt
	witnessed map[string]int64 // lockcore.NodeHealth.Witnessed
	// durable: 0 not known since the last Repair, 1 durable at every
	// Witness since, -1 not durable at one of them.
	durable int8
	// qdurable: the quarantine under way was begun because another
	// process took the data over (Durable while quarantined).
	qdurable bool
	// proc is the simulated server process; servedProc the one the data
	// was last put in service for.
	proc, servedProc int64
	// notDurable makes the node report itself not durable (SetDurable),
	// as a Redis node on appendfsync everysec.
	notDurable bool
}

func (r *rejoinState) restarted() bool { return r.proc != r.servedProc }

// report adds the rejoin fields to h.
func (r *rejoinState) report(h *lockcore.NodeHealth, quarantined bool) {
	h.ID, h.ServedAt = r.id, r.servedAt
	if len(r.witnessed) > 0 {
		h.Witnessed = maps.Clone(r.witnessed)
	}
	h.Durable = r.durable == 1 && (!quarantined || r.qdurable)
}

// quarantined notes a quarantine of a node that was (already) quarantined
// or not: it keeps the node Durable only when it was begun because
// another process took the data over than the one it was last served for,
// or when the node was quarantined so already (it served nothing since).
func (r *rejoinState) quarantined(already bool) {
	r.qdurable = r.durable == 1 && (r.proc != r.servedProc || (already && r.qdurable))
}

// served notes a Repair: the data has a new id, is in service for this
// process, and its durability is known again only at the next Witness.
func (r *rejoinState) served() {
	r.id, r.servedProc, r.durable, r.qdurable = lockcore.NewLeaseID(), r.proc, 0, false
}

// Restart makes the node behave as a server process restarted with every
// write it acknowledged on disk: its locks (expiring on its clock as
// before), counters and record are kept, and its next Check reports it
// Lost, as a new process that loaded the node's data. For tests.
func (n *Node) Restart() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rejoin.proc++
	if n.initialized {
		n.lost = true
	}
}

// SetDurable sets whether the node reports itself durable (true by
// default: a Restart keeps everything), for tests of nodes that may lose
// the tail of their writes.
func (n *Node) SetDurable(durable bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rejoin.notDurable = !durable
}

// Copy is a copy of a node's data, taken by Snapshot.
type Copy struct {
	locks       []entry
	counters    []int64
	initialized bool
	quarantined bool
	qsince      time.Time
	epoch       string
	rejoin      rejoinState
}

// Snapshot copies the node's data, as a copy of a Redis node's data files
// would: Restore loads it back. For tests.
func (n *Node) Snapshot() *Copy {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := &Copy{counters: slices.Clone(n.counters), initialized: n.initialized, quarantined: n.quarantined,
		qsince: n.qsince, epoch: n.epoch, rejoin: n.rejoin}
	c.rejoin.witnessed = maps.Clone(n.rejoin.witnessed)
	for _, e := range n.locks {
		c.locks = append(c.locks, entry{name: e.name, lease: e.lease, token: e.token, owner: e.owner, ttl: e.ttl, expires: e.expires, by: e.by, wanted: e.wanted})
	}
	return c
}

// Restore replaces the node's data with c, loaded by a new server
// process, as a restore from a copy of a Redis node's data files: its
// next Check reports it Lost. For tests.
func (n *Node) Restore(c *Copy) {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.locks)
	clear(n.rw) // add indexes the copy's readers-writer holds again
	clear(n.marks)
	n.names, n.expiry = newByName(), nil
	for _, e := range c.locks {
		n.add(&entry{name: e.name, lease: e.lease, token: e.token, owner: e.owner, ttl: e.ttl, expires: e.expires, by: e.by, wanted: e.wanted})
	}
	copy(n.counters, c.counters)
	n.initialized, n.quarantined, n.qsince, n.epoch = c.initialized, c.quarantined, c.qsince, c.epoch
	proc := n.rejoin.proc + 1
	n.rejoin = c.rejoin
	n.rejoin.witnessed = maps.Clone(c.rejoin.witnessed)
	n.rejoin.proc = proc
	n.lost = n.initialized // a new process, even of a quarantined copy
}

// Witness implements lockcore.Rejoiner.
func (n *Node) Witness(ctx context.Context, seen map[string]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r := &n.rejoin
	if n.out() != nil || n.lost || r.restarted() {
		return nil
	}
	r.servedAt = max(r.servedAt+1, n.now().UnixMilli())
	if r.id == "" {
		r.id = lockcore.NewLeaseID()
	}
	switch {
	case r.notDurable:
		r.durable = -1
	case r.durable == 0:
		r.durable = 1
	}
	if r.witnessed == nil {
		r.witnessed = map[string]int64{}
	}
	for id, at := range seen {
		r.witnessed[id] = max(r.witnessed[id], at)
	}
	return nil
}

// Lent implements lockcore.Rejoiner.
func (n *Node) Lent(epoch string) lockcore.LentNode { return lent{n, epoch} }

// lent is a quarantined node's data as another node's recovery reads it.
type lent struct {
	n     *Node
	epoch string
}

// held fails unless the node is still quarantined with l's epoch, for the
// process it was quarantined for. n.mu must be held.
func (l lent) held() error {
	n := l.n
	if !n.quarantined || n.lost || n.epoch == "" || n.epoch != l.epoch {
		return lockcore.ErrNodeChanged
	}
	return nil
}

func (l lent) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if err := l.held(); err != nil {
		return nil, "", err
	}
	names, next := l.n.scan(prefix, cursor, count)
	return names, next, nil
}

func (l lent) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if err := l.held(); err != nil {
		return nil, err
	}
	out := make([]lockcore.NodeLock, len(resources))
	for i, r := range resources {
		out[i] = l.n.inspect(r)
	}
	return out, nil
}

func (l lent) Counters(ctx context.Context) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if err := l.held(); err != nil {
		return nil, err
	}
	return slices.Clone(l.n.counters), nil
}
