package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

// backends are the node kinds every test runs on: in-memory nodes and real
// redis-servers (three per cluster).
var backends = []struct {
	name  string
	nodes func(t *testing.T) []lockcore.Node
}{
	{"memnode", func(*testing.T) []lockcore.Node {
		return []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	}},
	{"redis", redisNodes},
}

func redisNodes(t *testing.T) []lockcore.Node {
	var nodes []lockcore.Node
	for _, srv := range redistest.StartN(t, 3, nil) {
		n, err := redisnode.New(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		if err := nodetest.Initialize(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func newSemaphores(t *testing.T, nodes []lockcore.Node) (*lockcore.Redlock, *semaphore.Semaphores) {
	// Node calls get far more than the 50ms default: a loaded machine running
	// the race detector next to redis-servers can be slow to answer, and
	// every acquisition reads all 64 permits twice, so a stall of the
	// machine meets many calls at once.
	rl, err := lockcore.New(nodes, &lockcore.Options{NodeTimeout: time.Second, MinTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return rl, semaphore.New(rl)
}

func forEachBackend(t *testing.T, run func(t *testing.T, rl *lockcore.Redlock, s *semaphore.Semaphores)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rl, s := newSemaphores(t, b.nodes(t))
			run(t, rl, s)
		})
	}
}

func mustAcquire(t *testing.T, s *semaphore.Semaphores, req semaphore.AcquireRequest) *semaphore.Permit {
	t.Helper()
	p, err := s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return p
}

func TestKHoldersAtMostAndAFreedPermitIsTakenAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ *lockcore.Redlock, s *semaphore.Semaphores) {
		ctx := context.Background()
		req := semaphore.AcquireRequest{Name: "jobs", Permits: 3, TTL: 10 * time.Second, Owner: "w"}
		seen := map[int]*semaphore.Permit{}
		for range 3 {
			p := mustAcquire(t, s, req)
			if seen[p.Index] != nil || p.Index < 0 || p.Index >= 3 || p.Permits != 3 || p.Token <= 0 {
				t.Fatalf("permit %+v (held: %v)", p, seen)
			}
			seen[p.Index] = p
		}
		_, err := s.Acquire(ctx, req)
		var full *semaphore.FullError
		if !errors.As(err, &full) || full.Permits != 3 || full.RetryAfter <= 0 {
			t.Fatalf("a fourth acquisition: %v, want *FullError with a retry", err)
		}
		if got := s.InUse(); got != 3 {
			t.Fatalf("InUse = %d, want 3", got)
		}
		old := seen[1]
		if err := s.Release(ctx, "jobs", 1, old.ID, 0); err != nil {
			t.Fatal(err)
		}
		if got := s.InUse(); got != 2 {
			t.Fatalf("InUse after a release = %d, want 2", got)
		}
		p := mustAcquire(t, s, req)
		if p.Index != 1 || p.Token <= old.Token {
			t.Fatalf("after releasing permit 1 (token %d): got permit %d token %d", old.Token, p.Index, p.Token)
		}
		if err := s.Release(ctx, "jobs", 1, old.ID, 0); !errors.Is(err, lockcore.ErrHeldByOther) {
			t.Fatalf("release by the old lease: %v, want ErrHeldByOther", err)
		}
		if _, err := s.Extend(ctx, "jobs", 2, p.ID, 0, 0); !errors.Is(err, lockcore.ErrHeldByOther) && !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("extend of another permit with this lease: %v", err)
		}
		ext, err := s.Extend(ctx, "jobs", 1, p.ID, 20*time.Second, p.Token)
		if err != nil || ext.Token != p.Token || ext.TTL != 20*time.Second {
			t.Fatalf("extend: %+v, %v", ext, err)
		}
	})
}

func TestADifferentKIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ *lockcore.Redlock, s *semaphore.Semaphores) {
		ctx := context.Background()
		held := mustAcquire(t, s, semaphore.AcquireRequest{Name: "pool", Permits: 3, TTL: 10 * time.Second})
		for _, tc := range []struct {
			name string
			k    int
			wait time.Duration
		}{
			{"fewer permits", 2, 0},
			{"more permits", 4, 0},
			{"one permit, waiting", 1, time.Second},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := s.Acquire(ctx, semaphore.AcquireRequest{Name: "pool", Permits: tc.k, TTL: 2 * time.Second, Wait: tc.wait})
				var mm *semaphore.MismatchError
				if !errors.As(err, &mm) || mm.Held != 3 || mm.Asked != tc.k || mm.HolderPermit != held.Index {
					t.Fatalf("K=%d against a holder of K=3: %v", tc.k, err)
				}
			})
		}
		if got := s.InUse(); got != 1 {
			t.Fatalf("InUse = %d: a refused acquisition kept a permit", got)
		}
		if err := s.Release(ctx, "pool", held.Index, held.ID, 0); err != nil {
			t.Fatal(err)
		}
		// No permit held: the semaphore does not exist, and K is set anew.
		if p := mustAcquire(t, s, semaphore.AcquireRequest{Name: "pool", Permits: 2, TTL: 2 * time.Second}); p.Permits != 2 {
			t.Fatalf("%+v", p)
		}
	})
}

// A holder with another K that came in after the first read, before the
// grant, is seen by the second read, wherever its permit lies (beyond the
// request's K too: two first acquisitions at once), and the permit taken
// is given back.
func TestTheSecondReadSeesAHolderWithAnotherK(t *testing.T) {
	for _, c := range []struct {
		asked, other, otherPermit int
	}{
		{asked: 2, other: 5, otherPermit: 1},
		{asked: 1, other: 64, otherPermit: 63}, // beyond every read of K+1 permits
		{asked: 5, other: 2, otherPermit: 1},
	} {
		t.Run(fmt.Sprintf("K=%d,other K=%d on permit %d", c.asked, c.other, c.otherPermit), func(t *testing.T) {
			nodes := []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
			rl, _ := newSemaphores(t, nodes)
			intruder := &grantOnFirstAcquire{Locker: rl, rl: rl, permit: c.otherPermit, label: strconv.Itoa(c.other) + " other"}
			s := semaphore.New(intruder)
			_, err := s.Acquire(context.Background(), semaphore.AcquireRequest{Name: "race", Permits: c.asked, TTL: 2 * time.Second})
			if !errors.Is(err, semaphore.ErrMismatch) {
				t.Fatalf("acquire while a K=%d holder came in: %v, want ErrMismatch", c.other, err)
			}
			if _, err := rl.Inspect(context.Background(), lockcore.PermitResource("race", 0)); !errors.Is(err, lockcore.ErrNotHeld) {
				t.Fatalf("permit 0 after the refusal: %v, want it given back", err)
			}
		})
	}
}

// grantOnFirstAcquire lets another holder take permit (owner label) just
// before the first Acquire goes through: after the first read, before the
// second.
type grantOnFirstAcquire struct {
	semaphore.Locker
	rl     *lockcore.Redlock
	permit int
	label  string
	done   bool
}

func (g *grantOnFirstAcquire) Acquire(ctx context.Context, req lockcore.AcquireRequest) (*lockcore.Lease, error) {
	if !g.done {
		g.done = true
		if _, err := g.rl.Acquire(ctx, lockcore.AcquireRequest{Resource: lockcore.PermitResource("race", g.permit), TTL: time.Minute, Owner: g.label}); err != nil {
			return nil, err
		}
	}
	return g.Locker.Acquire(ctx, req)
}

func TestAWaiterGetsTheFirstPermitFreed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rl *lockcore.Redlock, s *semaphore.Semaphores) {
		ctx := context.Background()
		req := semaphore.AcquireRequest{Name: "q", Permits: 2, TTL: 10 * time.Second}
		a, b := mustAcquire(t, s, req), mustAcquire(t, s, req)
		got := make(chan *semaphore.Permit, 1)
		errs := make(chan error, 1)
		go func() {
			w := req
			w.Wait = 30 * time.Second
			p, err := s.Acquire(ctx, w)
			if err != nil {
				errs <- err
				return
			}
			got <- p
		}()
		waitFor(t, func() bool { return rl.Waiting() == 2 }, "the waiter to wait for both permits")
		if err := s.Release(ctx, "q", b.Index, b.ID, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if p.Index != b.Index || p.Token <= b.Token {
				t.Fatalf("waiter got %+v after permit %d (token %d) was freed", p, b.Index, b.Token)
			}
		case err := <-errs:
			t.Fatal(err)
		}
		waitFor(t, func() bool { return rl.Waiting() == 0 }, "the waiter's other wait to end")
		if info, err := rl.Inspect(ctx, lockcore.PermitResource("q", a.Index)); err != nil || info.Token != a.Token {
			t.Fatalf("permit %d: %+v, %v: the waiter's ended wait disturbed its holder", a.Index, info, err)
		}
	})
}

// A holder that dies (never releases) frees its permit when its TTL runs
// out: a waiter then gets it.
func TestAPermitWhoseHolderDiedIsFreeAgainAfterItsTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ *lockcore.Redlock, s *semaphore.Semaphores) {
		dead := mustAcquire(t, s, semaphore.AcquireRequest{Name: "d", Permits: 1, TTL: 2 * time.Second})
		p, err := s.Acquire(context.Background(), semaphore.AcquireRequest{Name: "d", Permits: 1, TTL: 2 * time.Second, Wait: 20 * time.Second})
		if err != nil || p.Index != 0 || p.Token <= dead.Token {
			t.Fatalf("%+v, %v", p, err)
		}
	})
}

func TestInspectShowsHoldersWithoutLeaseIDs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ *lockcore.Redlock, s *semaphore.Semaphores) {
		ctx := context.Background()
		if _, err := s.Inspect(ctx, "none"); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatalf("an unheld semaphore: %v, want ErrNotHeld", err)
		}
		// K above the first batch: Inspect reads on to K.
		req := semaphore.AcquireRequest{Name: "big", Permits: 40, TTL: 10 * time.Second, Owner: "worker 7"}
		byIndex := map[int]*semaphore.Permit{}
		for range 20 {
			p := mustAcquire(t, s, req)
			byIndex[p.Index] = p
		}
		last := byIndex[19]
		if last == nil || byIndex[0] == nil {
			t.Fatalf("20 permits, lowest first: %v", byIndex)
		}
		if err := s.Release(ctx, "big", 0, byIndex[0].ID, 0); err != nil {
			t.Fatal(err)
		}
		st, err := s.Inspect(ctx, "big")
		if err != nil {
			t.Fatal(err)
		}
		if st.Permits != 40 || len(st.Holders) != 19 || st.Holders[0].Index != 1 ||
			st.Holders[18].Index != 19 || st.Holders[18].Token != last.Token || st.Holders[18].Owner != "worker 7" {
			t.Fatalf("%+v", st)
		}
	})
}

func TestBadRequestsAreInvalid(t *testing.T) {
	_, s := newSemaphores(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		req   semaphore.AcquireRequest
		field string
	}{
		{"no permits", semaphore.AcquireRequest{Name: "a", Permits: 0, TTL: 2 * time.Second}, "permits"},
		{"too many permits", semaphore.AcquireRequest{Name: "a", Permits: lockcore.MaxPermits + 1, TTL: 2 * time.Second}, "permits"},
		{"a permit's name", semaphore.AcquireRequest{Name: "a/1", Permits: 1, TTL: 2 * time.Second}, "name"},
		{"an owner too long", semaphore.AcquireRequest{Name: "a", Permits: 1, TTL: 2 * time.Second, Owner: longOwner()}, "owner"},
		{"a TTL too short", semaphore.AcquireRequest{Name: "a", Permits: 1, TTL: time.Millisecond}, "ttl_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Acquire(ctx, tc.req)
			var inv *lockcore.InvalidError
			if !errors.As(err, &inv) || inv.Field != tc.field {
				t.Fatalf("%v, want an InvalidError on %s", err, tc.field)
			}
		})
	}
	if err := s.Release(ctx, "a", lockcore.MaxPermits, lockcore.NewLeaseID(), 0); !errors.Is(err, lockcore.ErrInvalid) {
		t.Fatalf("release of permit %d: %v", lockcore.MaxPermits, err)
	}
}

func longOwner() string {
	b := make([]byte, semaphore.MaxOwner+1)
	for i := range b {
		b[i] = 'o'
	}
	return string(b)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A release that hands its permit to a waiter answers after the waiter's
// grant: the waiter's permit is still counted in use.
func TestAHandedOffPermitStaysCounted(t *testing.T) {
	rl, _ := newSemaphores(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)})
	granted := make(chan *semaphore.Permit, 1)
	lk := &releaseAfter{Locker: rl}
	s := semaphore.New(lk)
	ctx := context.Background()
	held := mustAcquire(t, s, semaphore.AcquireRequest{Name: "h", Permits: 1, TTL: 10 * time.Second})
	go func() {
		p, err := s.Acquire(ctx, semaphore.AcquireRequest{Name: "h", Permits: 1, TTL: 10 * time.Second, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		granted <- p
	}()
	waitFor(t, func() bool { return rl.Waiting() == 1 }, "the waiter")
	var p *semaphore.Permit
	lk.after = func() { p = <-granted }
	if err := s.Release(ctx, "h", 0, held.ID, 0); err != nil {
		t.Fatal(err)
	}
	if p == nil || p.Token <= held.Token {
		t.Fatalf("waiter got %+v", p)
	}
	if got := s.InUse(); got != 1 {
		t.Fatalf("InUse = %d after a hand-off, want 1", got)
	}
}

// releaseAfter runs after (if set) once a release is done, before it
// answers.
type releaseAfter struct {
	semaphore.Locker
	after func()
}

func (r *releaseAfter) Release(ctx context.Context, req lockcore.ReleaseRequest) error {
	err := r.Locker.Release(ctx, req)
	if r.after != nil {
		r.after()
	}
	return err
}

// Two waiters on one replica: the first to arrive gets the first permit
// freed, the second waits on for the next.
func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rl *lockcore.Redlock, s *semaphore.Semaphores) {
		ctx := context.Background()
		req := semaphore.AcquireRequest{Name: "fifo", Permits: 2, TTL: 10 * time.Second}
		a, b := mustAcquire(t, s, req), mustAcquire(t, s, req)
		type got struct {
			who int
			p   *semaphore.Permit
			err error
		}
		answers := make(chan got, 2)
		wait := req
		wait.Wait = 30 * time.Second
		for who := 1; who <= 2; who++ {
			go func() {
				p, err := s.Acquire(ctx, wait)
				answers <- got{who, p, err}
			}()
			waitFor(t, func() bool { return rl.Waiting() == 2*who }, "waiter "+strconv.Itoa(who)+" to wait for both permits")
		}
		if err := s.Release(ctx, "fifo", a.Index, a.ID, 0); err != nil {
			t.Fatal(err)
		}
		first := <-answers
		if first.err != nil || first.who != 1 || first.p.Index != a.Index {
			t.Fatalf("after permit %d was freed: waiter %d got %+v, %v; want waiter 1", a.Index, first.who, first.p, first.err)
		}
		waitFor(t, func() bool { return rl.Waiting() == 2 }, "waiter 1's other wait to end")
		if err := s.Release(ctx, "fifo", b.Index, b.ID, 0); err != nil {
			t.Fatal(err)
		}
		second := <-answers
		if second.err != nil || second.who != 2 || second.p.Index != b.Index {
			t.Fatalf("after permit %d was freed: waiter %d got %+v, %v; want waiter 2", b.Index, second.who, second.p, second.err)
		}
	})
}

// A waiter granted several permits at once (two freed together) keeps
// one and gives the others back.
func TestAWaiterKeepsOnePermit(t *testing.T) {
	rl, _ := newSemaphores(t, []lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)})
	s := semaphore.New(&refuseAtOnce{Locker: rl, all: make(chan struct{})})
	p, err := s.Acquire(context.Background(), semaphore.AcquireRequest{Name: "many", Permits: 3, TTL: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Inspect(context.Background(), "many")
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Index != p.Index {
		t.Fatalf("after one acquisition that was granted every permit while waiting: %+v, %v; want permit %d alone", st, err, p.Index)
	}
}

// refuseAtOnce answers every acquisition that does not wait as if the
// permit were held, so that the semaphore waits for all three, which are
// free: each wait is granted at once, and none answers before all three
// are granted.
type refuseAtOnce struct {
	semaphore.Locker
	mu      sync.Mutex
	granted int
	all     chan struct{}
}

func (r *refuseAtOnce) Acquire(ctx context.Context, req lockcore.AcquireRequest) (*lockcore.Lease, error) {
	if req.Wait == 0 {
		return nil, &lockcore.TakenError{Resource: req.Resource, RetryAfter: time.Second}
	}
	lease, err := r.Locker.Acquire(ctx, req)
	r.mu.Lock()
	if r.granted++; r.granted == 3 {
		close(r.all)
	}
	r.mu.Unlock()
	<-r.all
	return lease, err
}
