package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// listCluster is a Redlock with its nodes and, for Redis, its servers.
type listCluster struct {
	rl      *lockcore.Redlock
	nodes   []lockcore.Node
	servers []*redistest.Server
}

// listKinds are the node kinds the listing and force-release tests run on:
// real redis-server processes and the in-memory node.
var listKinds = []struct {
	name string
	make func(t *testing.T, n int) listCluster
}{
	{"redis", func(t *testing.T, n int) listCluster {
		servers := redistest.StartN(t, n, nil)
		var nodes []lockcore.Node
		for _, s := range servers {
			rn, err := redisnode.New(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rn.Close() })
			nodes = append(nodes, rn)
		}
		return listCluster{rl: newListRedlock(t, nodes), nodes: nodes, servers: servers}
	}},
	{"memory", func(t *testing.T, n int) listCluster {
		var nodes []lockcore.Node
		for range n {
			nodes = append(nodes, memnode.New(nil))
		}
		return listCluster{rl: newListRedlock(t, nodes), nodes: nodes}
	}},
}

func newListRedlock(t *testing.T, nodes []lockcore.Node) *lockcore.Redlock {
	t.Helper()
	// A generous node timeout: these tests are about what is listed, not
	// about latency on a loaded machine under -race.
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: time.Second, MinTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	// Its first check initializes new nodes, which the tests then also
	// write to directly.
	if err := rl.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rl
}

func takeFor(t *testing.T, rl *lockcore.Redlock, resource, owner string) *lockcore.Lease {
	t.Helper()
	l, err := rl.Acquire(context.Background(), lockcore.AcquireRequest{Resource: resource, TTL: time.Minute, Owner: owner})
	if err != nil {
		t.Fatalf("acquire %s: %v", resource, err)
	}
	return l
}

// listAll pages through a listing and fails t if a page is over limit.
func listAll(t *testing.T, rl *lockcore.Redlock, prefix string, limit int) (locks []lockcore.LockInfo, pages int) {
	t.Helper()
	cursor := ""
	for {
		p, err := rl.List(context.Background(), prefix, limit, cursor)
		if err != nil {
			t.Fatalf("list %q after %d pages: %v", prefix, pages, err)
		}
		pages++
		if len(p.Locks) > max(limit, 1) && (limit != 0 || len(p.Locks) > lockcore.DefaultListLimit) {
			t.Fatalf("page %d holds %d locks, limit %d", pages, len(p.Locks), limit)
		}
		locks = append(locks, p.Locks...)
		if p.Next == "" {
			return locks, pages
		}
		if pages > 10000 {
			t.Fatal("the listing never ends")
		}
		cursor = p.Next
	}
}

func names(locks []lockcore.LockInfo) []string {
	var out []string
	for _, l := range locks {
		out = append(out, l.Resource)
	}
	slices.Sort(out)
	return out
}

func TestListShowsHeldLocksByPrefix(t *testing.T) {
	for _, kind := range listKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := kind.make(t, 3)
			want := map[string]*lockcore.Lease{}
			for _, r := range []string{"invoice-1", "invoice-2", "invoices", "billing:7"} {
				want[r] = takeFor(t, c.rl, r, "owner of "+r)
			}
			released := takeFor(t, c.rl, "invoice-3", "")
			if err := c.rl.Release(context.Background(), lockcore.ReleaseRequest{Resource: "invoice-3", LeaseID: released.ID}); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				prefix string
				want   []string
			}{
				{"", []string{"billing:7", "invoice-1", "invoice-2", "invoices"}},
				{"invoice-", []string{"invoice-1", "invoice-2"}},
				{"invoice", []string{"invoice-1", "invoice-2", "invoices"}},
				{"billing:", []string{"billing:7"}},
				{"nothing", nil},
			} {
				locks, _ := listAll(t, c.rl, tc.prefix, 0)
				if got := names(locks); !slices.Equal(got, tc.want) {
					t.Errorf("prefix %q lists %v, want %v", tc.prefix, got, tc.want)
				}
				for _, l := range locks {
					w := want[l.Resource]
					if l.Token != w.Token || l.Owner != "owner of "+l.Resource || l.TTL != time.Minute ||
						l.Remaining <= 0 || l.Remaining > time.Minute {
						t.Errorf("listed %+v, acquired with token %d, TTL 1m", l, w.Token)
					}
				}
			}
		})
	}
}

func TestListRefusesBadArguments(t *testing.T) {
	c := listKinds[1].make(t, 3)
	good, err := c.rl.List(context.Background(), "a", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, prefix string
		limit        int
		cursor       string
		field        string
	}{
		{"a prefix outside the resource alphabet", "a/b", 0, "", "prefix"},
		{"a limit over the maximum", "", lockcore.MaxListLimit + 1, "", "limit"},
		{"a negative limit", "", -1, "", "limit"},
		{"a cursor that is not one", "", 0, "not-a-cursor!", "cursor"},
		{"a cursor of another prefix", "b", 0, "eyJwIjoiYSIsIm4iOjF9", "cursor"},
		{"a cursor naming a node that does not exist", "a", 0, "eyJwIjoiYSIsIm4iOjl9", "cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.rl.List(context.Background(), tc.prefix, tc.limit, tc.cursor)
			var ie *lockcore.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("got %v, want an InvalidError on %s", err, tc.field)
			}
		})
	}
	if good.Next != "" {
		t.Errorf("an empty listing has a next cursor %q", good.Next)
	}
}

// Paging across 2,500 locks lists each exactly once, on pages no larger than
// the limit, including limits that stop a page within a node's scan step.
func TestListPagesAcrossManyLocks(t *testing.T) {
	for _, kind := range listKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := kind.make(t, 3)
			const n = 2500
			var wg sync.WaitGroup
			errs := make(chan error, n)
			work := make(chan int)
			for range 8 {
				wg.Go(func() {
					for i := range work {
						_, err := c.rl.Acquire(context.Background(), lockcore.AcquireRequest{
							Resource: fmt.Sprintf("job-%04d", i), TTL: 5 * time.Minute})
						if err != nil {
							errs <- err
						}
					}
				})
			}
			for i := range n {
				work <- i
			}
			close(work)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			takeFor(t, c.rl, "other", "")
			for _, limit := range []int{1000, 100, 7} {
				locks, pages := listAll(t, c.rl, "job-", limit)
				got := names(locks)
				if len(got) != n || len(slices.Compact(slices.Clone(got))) != n {
					t.Fatalf("limit %d: %d locks listed (%d distinct) in %d pages, want each of %d once",
						limit, len(got), len(slices.Compact(slices.Clone(got))), pages, n)
				}
				if got[0] != "job-0000" || got[n-1] != fmt.Sprintf("job-%04d", n-1) {
					t.Errorf("limit %d: listed %s..%s", limit, got[0], got[n-1])
				}
				t.Logf("limit %d: %d pages", limit, pages)
			}
		})
	}
}

// A lock is listed only when a quorum holds it for one lease, and once,
// whichever node holds a stale copy of another lease.
func TestListNeedsAQuorumToAgree(t *testing.T) {
	for _, kind := range listKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := kind.make(t, 3)
			ctx := context.Background()
			take := func(resource, lease string, tok int64, on ...int) {
				t.Helper()
				for _, i := range on {
					rep, err := c.nodes[i].Acquire(ctx, lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: time.Minute, Owner: lease})
					if err != nil || rep.Status != lockcore.StatusGranted {
						t.Fatalf("node %d: %v %v", i, rep, err)
					}
					if err := c.nodes[i].RaiseFence(ctx, resource, lease, tok); err != nil {
						t.Fatal(err)
					}
				}
			}
			const leaseA, leaseB, leaseC = "lease-A-0123456789abcdef", "lease-B-0123456789abcdef", "lease-C-0123456789abcdef"
			take("stale-first", leaseB, 1, 0)    // node 0: a stale copy of another lease
			take("stale-first", leaseA, 5, 1, 2) // nodes 1 and 2 agree
			take("stale-last", leaseA, 5, 0, 1)
			take("stale-last", leaseB, 1, 2)
			take("minority", leaseA, 1, 2)
			take("split", leaseA, 1, 0)
			take("split", leaseB, 1, 1)
			take("split", leaseC, 1, 2)
			for _, limit := range []int{100, 1} {
				locks, _ := listAll(t, c.rl, "", limit)
				if got := names(locks); !slices.Equal(got, []string{"stale-first", "stale-last"}) {
					t.Fatalf("limit %d: listed %v, want stale-first and stale-last once each", limit, got)
				}
				for _, l := range locks {
					if l.Token != 5 || l.Owner != leaseA {
						t.Errorf("listed %+v, want the quorum's lease (token 5)", l)
					}
					info, err := c.rl.Inspect(ctx, l.Resource)
					if err != nil || info.Token != l.Token {
						t.Errorf("Inspect(%s) = %+v, %v; the listing says token %d", l.Resource, info, err, l.Token)
					}
				}
			}
			if kind.name != "redis" {
				return
			}
			// With node 0 down, its place is taken by the next node: every
			// lock a quorum of the answering nodes holds is still listed once.
			c.servers[0].Kill()
			locks, _ := listAll(t, c.rl, "", 100)
			if got := names(locks); !slices.Equal(got, []string{"stale-first"}) {
				t.Errorf("with node 0 down: listed %v, want stale-first (stale-last is held on one answering node)", got)
			}
			c.servers[1].Kill()
			if _, err := c.rl.List(ctx, "", 100, ""); !errors.Is(err, lockcore.ErrNoQuorum) {
				t.Errorf("with two of three nodes down: %v, want ErrNoQuorum", err)
			}
		})
	}
}

func TestForceRelease(t *testing.T) {
	for _, kind := range listKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := kind.make(t, 3)
			ctx := context.Background()
			held := takeFor(t, c.rl, "stuck", "crashed-worker")

			// A waiter is woken by the force release, long before the TTL.
			got := make(chan error, 1)
			var next *lockcore.Lease
			go func() {
				l, err := c.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "stuck", TTL: time.Minute, Wait: 30 * time.Second})
				next = l
				got <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for c.rl.Waiting() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			tok, err := c.rl.ForceRelease(ctx, "stuck")
			if err != nil || tok != held.Token {
				t.Fatalf("ForceRelease = %d, %v; want the holder's token %d", tok, err, held.Token)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("the waiter: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not woken by the force release")
			}
			if next.Token <= held.Token {
				t.Errorf("the next holder's token %d is not above the broken lock's %d", next.Token, held.Token)
			}
			// The waiter's grant was answered at a quorum; a node that missed
			// the grace may grant it after the force release below.
			lockcore.Settle(c.rl)
			if err := c.rl.Release(ctx, lockcore.ReleaseRequest{Resource: "stuck", LeaseID: held.ID}); !errors.Is(err, lockcore.ErrHeldByOther) {
				t.Errorf("the broken lease's release: %v, want ErrHeldByOther", err)
			}
			if _, err := c.rl.ForceRelease(ctx, "stuck"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.rl.ForceRelease(ctx, "stuck"); !errors.Is(err, lockcore.ErrNotHeld) {
				t.Errorf("force-releasing a free lock: %v, want ErrNotHeld", err)
			}
			if _, err := c.rl.ForceRelease(ctx, "no/such"); !errors.Is(err, lockcore.ErrInvalid) {
				t.Errorf("a bad name: %v, want ErrInvalid", err)
			}
			after := takeFor(t, c.rl, "stuck", "")
			if after.Token <= next.Token {
				t.Errorf("token after two force releases %d, want above %d", after.Token, next.Token)
			}
		})
	}
}
