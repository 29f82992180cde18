package memnode

import (
	"context"
	"strings"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

var (
	_ lockcore.Lister        = (*Node)(nil)
	_ lockcore.ForceReleaser = (*Node)(nil)
)

// scanStep bounds the names one ScanLocks step examines, whatever count
// asks for (count is a hint, as SCAN's COUNT is): a step holds the node's
// mutex, so acquisitions wait for at most that many names.
const scanStep = 256

// ScanLocks implements lockcore.Lister. The walk is in name order, from
// the node's index: a step seeks past cursor in O(log n) and examines at
// most count names under prefix (at most scanStep), returning those still
// held. cursor and next are the last name examined, so a step taken again
// returns the same names that are still held.
func (n *Node) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.out(); err != nil { // out of service: its locks may not be all there are
		return nil, "", err
	}
	names, next := n.scan(prefix, cursor, count)
	return names, next, nil
}

// scan is a ScanLocks step whatever the node's state. n.mu must be held.
func (n *Node) scan(prefix, cursor string, count int) ([]string, string) {
	count = min(max(count, 1), scanStep)
	now := n.now()
	e := n.names.from(prefix, true)
	if cursor >= prefix {
		e = n.names.from(cursor, false)
	}
	var names []string
	last := ""
	for examined := 0; e != nil && examined < count && strings.HasPrefix(e.name, prefix); examined++ {
		if now.Before(e.expires) {
			names = append(names, e.name)
		}
		last, e = e.name, e.next[0]
	}
	if e == nil || !strings.HasPrefix(e.name, prefix) {
		return names, ""
	}
	return names, last
}

// InspectLocks implements lockcore.Lister.
func (n *Node) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	out := make([]lockcore.NodeLock, len(resources))
	for i, r := range resources {
		l, err := n.Inspect(ctx, r)
		if err != nil {
			return nil, err
		}
		out[i] = l
	}
	return out, nil
}

// BreakLock implements lockcore.ForceReleaser: under the node's lock, the
// lock on resource (if any) is dropped and lease holds it for ttl, with the
// dropped lock's token.
func (n *Node) BreakLock(ctx context.Context, resource, lease string, ttl time.Duration) (broken, counter int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.live(resource); e != nil {
		broken = e.token
		n.drop(e)
	}
	n.add(&entry{name: resource, lease: lease, token: broken, ttl: ttl, expires: n.now().Add(ttl)})
	return broken, n.counters[lockcore.FenceSlot(resource)], nil
}
