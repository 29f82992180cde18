package memnode

import (
	"context"
	"slices"
	"strings"

	"github.com/lockgate/lockgate/lockcore"
)

var (
	_ lockcore.Lister        = (*Node)(nil)
	_ lockcore.ForceReleaser = (*Node)(nil)
)

// ScanLocks implements lockcore.Lister. The walk is in name order: cursor
// and next are the last name returned, so a step taken again returns the
// same names that are still held.
func (n *Node) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	count = max(count, 1)
	n.mu.Lock()
	var names []string
	for name := range n.locks {
		if strings.HasPrefix(name, prefix) && name > cursor && n.live(name) != nil {
			names = append(names, name)
		}
	}
	n.mu.Unlock()
	slices.Sort(names)
	if len(names) <= count {
		return names, "", nil
	}
	names = names[:count]
	return names, names[count-1], nil
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

// ForceRelease implements lockcore.ForceReleaser: the lock is deleted and
// every watch's notify called, under the node's lock.
func (n *Node) ForceRelease(ctx context.Context, resource string) (lockcore.NodeReply, error) {
	if err := ctx.Err(); err != nil {
		return lockcore.NodeReply{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.live(resource)
	if e == nil {
		return lockcore.NodeReply{Status: lockcore.StatusAbsent}, nil
	}
	delete(n.locks, resource)
	n.announce(resource)
	return lockcore.NodeReply{Status: lockcore.StatusOK, Token: e.token}, nil
}
