package redisnode

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lockcore"
)

var (
	_ lockcore.Rejoiner = (*Node)(nil)

	//go:embed witness.lua
	witnessLua    string
	witnessScript = redis.NewScript(witnessLua)
	//go:embed lent.lua
	lentLua    string
	lentScript = redis.NewScript(lentLua)
)

// Witness implements lockcore.Rejoiner with witness.lua, which acts only on
// the server process the node's data is in service for, whatever
// connection carries it. The durability it records is what this Node's
// last Check found (appendonly with appendfsync always).
func (n *Node) Witness(ctx context.Context, seen map[string]int64) error {
	args := make([]any, 0, 2+2*len(seen))
	durable := "0"
	if n.durable.Load() {
		durable = "1"
	}
	args = append(args, durable, lockcore.NewLeaseID())
	for id, at := range seen {
		args = append(args, id, strconv.FormatInt(at, 10))
	}
	return timedOut(ctx, witnessScript.Run(ctx, n.rdb, []string{metaKey, witKey}, args...).Err())
}

// Lent implements lockcore.Rejoiner: every read runs lent.lua in the same
// round trip, on the same connection, after the read, which fails it
// unless the node is still quarantined with epoch by the process the
// quarantine was begun for. The reads bypass the bound lock scripts
// (bound.go): a quarantined process has none.
func (n *Node) Lent(epoch string) lockcore.LentNode { return lentNode{n, epoch} }

// lentNode is a quarantined Node's data as another node's recovery reads
// it (lockcore.Rejoiner.Lent).
type lentNode struct {
	n     *Node
	epoch string
}

// still queues, on pipe, lent.lua's check that the node is still
// quarantined with l's epoch, reading the counters of slots (none: only
// the check).
func (l lentNode) still(ctx context.Context, pipe redis.Pipeliner, slots []string) *redis.Cmd {
	return pipe.Eval(ctx, lentLua, append([]string{metaKey}, slots...), l.epoch)
}

// held reads lent.lua's reply: the counters after "ok", or
// lockcore.ErrNodeChanged.
func held(c *redis.Cmd) ([]any, error) {
	v, err := c.Result()
	if err == redis.Nil {
		return nil, lockcore.ErrNodeChanged
	}
	if err != nil {
		return nil, err
	}
	arr, _ := v.([]any)
	if len(arr) == 0 || arr[0] != "ok" {
		return nil, lockcore.ErrNodeChanged
	}
	return arr[1:], nil
}

// ScanLocks implements lockcore.Lister as Node.ScanLocks does.
func (l lentNode) ScanLocks(ctx context.Context, prefix, cursor string, count int) ([]string, string, error) {
	var cur uint64
	if cursor != "" {
		c, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("redisnode: bad scan cursor")
		}
		cur = c
	}
	pipe := l.n.rdb.Pipeline()
	scan := pipe.Scan(ctx, cur, scanPattern(prefix), int64(max(count, 1)))
	chk := l.still(ctx, pipe, nil)
	_, _ = pipe.Exec(ctx)
	if _, err := held(chk); err != nil {
		return nil, "", timedOut(ctx, err)
	}
	keys, next, err := scan.Result()
	if err != nil {
		return nil, "", timedOut(ctx, err)
	}
	names, cursor := scanned(keys, next, prefix)
	// The step's readers-writer holds, named from their hashes read
	// before the same check (rule R6 of lockcore's doc).
	holds, err := rwHoldNamesThen(ctx, l.n.rdb, rwKeysOf(keys), prefix, func(pipe redis.Pipeliner) func() error {
		chk := l.still(ctx, pipe, nil)
		return func() error {
			_, err := held(chk)
			return err
		}
	})
	if err != nil {
		return nil, "", err
	}
	return append(names, holds...), cursor, nil
}

// InspectLocks implements lockcore.Lister as Node.InspectLocks does.
func (l lentNode) InspectLocks(ctx context.Context, resources []string) ([]lockcore.NodeLock, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	return l.n.readLocks(ctx, resources, func(pipe redis.Pipeliner) func() error {
		chk := l.still(ctx, pipe, nil)
		return func() error {
			_, err := held(chk)
			return err
		}
	})
}

// Counters reads every slot's counter, marked or not, lentBatch slots a
// call.
func (l lentNode) Counters(ctx context.Context) ([]int64, error) {
	const lentBatch = 1024
	pipe := l.n.rdb.Pipeline()
	var cmds []*redis.Cmd
	for i := 0; i < len(slotKeys); i += lentBatch {
		cmds = append(cmds, l.still(ctx, pipe, slotKeys[i:min(i+lentBatch, len(slotKeys))]))
	}
	_, _ = pipe.Exec(ctx)
	out := make([]int64, 0, len(slotKeys))
	for _, c := range cmds {
		vals, err := held(c)
		if err != nil {
			return nil, timedOut(ctx, err)
		}
		for _, v := range vals {
			s, _ := v.(string)
			if s == "" {
				return nil, lockcore.ErrNodeChanged // a slot without its counter: not the data quarantined
			}
			x, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("redisnode: counter of slot %d is %q: %w", len(out), s, err)
			}
			out = append(out, x)
		}
	}
	return out, nil
}
