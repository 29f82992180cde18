package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// exclusion records what clients of several gateways were granted and
// finds two holders of a lock at once, or a token that does not grow. A
// holder stops counting as one when it decides to release (before its
// Release is sent), so a grant the release allowed is never taken for a
// second holder.
type exclusion struct {
	mu       sync.Mutex
	held     map[string]heldBy
	last     map[string]int64
	problems []string
}

type heldBy struct {
	lease string
	token int64
	until time.Time
}

func (x *exclusion) granted(res string, l *lockcore.Lease) {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	if h, ok := x.held[res]; ok && now.Before(h.until) {
		x.problems = append(x.problems, fmt.Sprintf("%s: token %d granted while token %d held it for %v more", res, l.Token, h.token, h.until.Sub(now)))
	}
	if l.Token <= x.last[res] {
		x.problems = append(x.problems, fmt.Sprintf("%s: token %d after %d", res, l.Token, x.last[res]))
	}
	x.held[res], x.last[res] = heldBy{l.ID, l.Token, now.Add(l.Validity)}, l.Token
}

func (x *exclusion) releasing(res, lease string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.held[res].lease == lease {
		delete(x.held, res)
	}
}

// nodeSetStep is one change of a gateway's node list.
type nodeSetStep struct {
	name string
	list []int // indexes of the servers
	kill int   // a server killed before the step (-1: none)
}

// TestTheNodeSetChangesOneNodeAtATime: the node set grows from one node to
// five and a dead node is replaced, one node per step, under four clients,
// while the gateway with the list before each step runs beside the one
// with the list after it (a rolling restart of the gateways). A step adds
// or removes one node, so that any quorum of the list before and any
// quorum of the list after share a node (two majorities of n and n+1
// nodes: ⌊n/2⌋+1 + ⌊(n+1)/2⌋+1 > n+1), and the added node, empty, is
// recovered from the others (rule 7) before the next step: no two
// holders at once, tokens only grow, and the new gateway serves within
// seconds of its start, with a quarantine of an hour were it not. The
// control swaps every node at once (a new cluster beside the old one):
// the checker finds two holders.
func TestTheNodeSetChangesOneNodeAtATime(t *testing.T) {
	t.Run("one node at a time", func(t *testing.T) {
		problems, longest := changeNodeSet(t, []int{0}, []nodeSetStep{
			{"1 → 2 nodes", []int{0, 1}, -1},
			{"2 → 3 nodes", []int{0, 1, 2}, -1},
			{"3 → 4 nodes", []int{0, 1, 2, 3}, -1},
			{"4 → 5 nodes", []int{0, 1, 2, 3, 4}, -1},
			{"node 2 dies and is removed: 5 → 4", []int{0, 1, 3, 4}, 2},
			{"node 5 added in its place: 4 → 5", []int{0, 1, 3, 4, 5}, -1},
		})
		if len(problems) > 0 {
			t.Errorf("%d violations:\n%s", len(problems), strings.Join(problems, "\n"))
		}
		if longest > 5*time.Second {
			t.Errorf("the longest time without a grant was %v", longest)
		}
		t.Logf("the longest time without a grant: %v", longest.Round(time.Millisecond))
	})
	t.Run("control: every node swapped at once", func(t *testing.T) {
		problems, _ := changeNodeSet(t, []int{0, 1, 2}, []nodeSetStep{{"3 nodes → 3 others", []int{3, 4, 5}, -1}})
		if len(problems) == 0 {
			t.Fatal("no violation found with two disjoint node lists serving side by side: the checker cannot see two holders")
		}
		t.Logf("%d violations, the first: %s", len(problems), problems[0])
	})
}

// changeNodeSet runs four clients over gateways while the node list goes
// from first through steps, the gateway of each list beside the one of
// the list before until the new one's nodes all serve, and returns what
// the exclusion checker found and the longest time without a grant.
func changeNodeSet(t *testing.T, first []int, steps []nodeSetStep) ([]string, time.Duration) {
	t.Helper()
	srvs := redistest.StartN(t, 6, &redistest.Options{AOF: true})
	gateway := func(list []int) *lockcore.Redlock {
		nodes := make([]*redistest.Server, len(list))
		for i, k := range list {
			nodes[i] = srvs[k]
		}
		return newRedlock(t, nodes, &lockcore.Options{NodeTimeout: 200 * time.Millisecond, MinTTL: 400 * time.Millisecond,
			MaxTTL: time.Hour, CheckInterval: 50 * time.Millisecond})
	}
	var (
		mu       sync.Mutex
		active   = []*lockcore.Redlock{gateway(first)}
		x        = &exclusion{held: map[string]heldBy{}, last: map[string]int64{}}
		lastOK   atomic.Int64 // unix ns of the last grant
		longest  atomic.Int64 // the longest time between two grants, ns
		unwanted = make(chan error, 16)
	)
	lastOK.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	for c := range 4 {
		clients.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				mu.Lock()
				rl := active[(c+i)%len(active)]
				mu.Unlock()
				res := fmt.Sprintf("nodeset-%d", (c+i)%3)
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := rl.Acquire(actx, lockcore.AcquireRequest{Resource: res, TTL: 2 * time.Second})
				acancel()
				switch {
				case ctx.Err() != nil:
					return
				case errors.Is(err, lockcore.ErrTaken) || errors.Is(err, lockcore.ErrNoQuorum) || errors.Is(err, lockcore.ErrClosed) ||
					errors.Is(err, context.DeadlineExceeded):
					time.Sleep(10 * time.Millisecond)
					continue
				case err != nil:
					select {
					case unwanted <- fmt.Errorf("acquire %s: %w", res, err):
					default:
					}
					continue
				}
				now := time.Now().UnixNano()
				if gap := now - lastOK.Swap(now); gap > longest.Load() {
					longest.Store(gap)
				}
				x.granted(res, l)
				time.Sleep(5 * time.Millisecond)
				x.releasing(res, l.ID)
				_ = rl.Release(context.WithoutCancel(ctx), lockcore.ReleaseRequest{Resource: res, LeaseID: l.ID})
			}
		})
	}
	defer func() {
		cancel()
		clients.Wait()
	}()
	granted := func() {
		t.Helper()
		start := lastOK.Load()
		if !poll(10*time.Second, func() bool { return lastOK.Load() > start }) {
			t.Fatalf("no grant for 10 s")
		}
	}
	granted()
	for _, st := range steps {
		if st.kill >= 0 {
			srvs[st.kill].Kill()
		}
		started := time.Now()
		next := gateway(st.list)
		mu.Lock()
		active = append(active, next) // beside the gateway of the list before
		mu.Unlock()
		var serving time.Duration
		if !poll(20*time.Second, func() bool {
			for _, r := range next.NodeReports() {
				if r.State != lockcore.NodeServing {
					return false
				}
			}
			serving = time.Since(started)
			return true
		}) {
			t.Fatalf("%s: the new gateway's nodes did not all serve within 20 s: %+v", st.name, next.NodeReports())
		}
		time.Sleep(500 * time.Millisecond) // both lists serving side by side
		mu.Lock()
		old := active[0]
		active = []*lockcore.Redlock{next}
		mu.Unlock()
		old.Close()
		granted()
		t.Logf("%s: every node serving %v after the new gateway started", st.name, serving.Round(time.Millisecond))
	}
	cancel()
	clients.Wait()
	close(unwanted)
	for err := range unwanted {
		t.Error(err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.problems, time.Duration(longest.Load())
}
