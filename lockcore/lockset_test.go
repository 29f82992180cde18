package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

func setMemNodes(n int) func(t *testing.T) []lockcore.Node {
	return func(t *testing.T) []lockcore.Node {
		nodes := make([]lockcore.Node, n)
		for i := range nodes {
			nodes[i] = memnode.New(nil)
		}
		return nodes
	}
}

func TestLockSetsOverMemoryNodes(t *testing.T) { nodetest.RunSets(t, setMemNodes(3)) }

// A set names 1 to 64 valid resources, none twice; its members are put in
// the canonical order.
func TestSetMembersChecksTheSet(t *testing.T) {
	many := make([]string, lockcore.MaxSetMembers+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%02d", i)
	}
	for _, tt := range []struct {
		name    string
		members []string
		want    string // the reason's start, "" for a valid set
	}{
		{"one member is a set", []string{"a"}, ""},
		{"64 members are a set", many[:64], ""},
		{"no member is not", nil, "a lock set has 1 to 64 members"},
		{"65 are not", many, "a lock set has 1 to 64 members"},
		{"a member named twice is refused", []string{"a", "b", "a"}, `member "a" is named twice`},
		{"a member outside the alphabet is refused", []string{"a", "b,c"}, `member "b,c"`},
		{"an empty member is refused", []string{"a", ""}, `member ""`},
	} {
		got, err := lockcore.SetMembers(tt.members)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		inv, ok := errors.AsType[*lockcore.InvalidError](err)
		if !ok || inv.Field != "resources" || !strings.HasPrefix(inv.Reason, tt.want) {
			t.Errorf("%s: %v, %v; want an *InvalidError on resources: %s...", tt.name, got, err, tt.want)
		}
	}
	if got, _ := lockcore.SetMembers([]string{"c", "a", "b"}); lockcore.SetName(got) != "a,b,c" {
		t.Errorf("canonical order: %v", got)
	}
}

// Without the canonical order (rule S2) two sets queued in opposite orders
// deadlock until the first one's wait runs out: the check of
// nodetest.OverlappingSets fails for sets taken in the order asked.
func TestSetsTakenOutOfOrderDeadlock(t *testing.T) {
	rl, err := lockcore.New(setMemNodes(3)(t), nodetest.SetOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	const wait = time.Second
	err2, err1, after := nodetest.OverlappingSets(t, rl, "ooo-a", "ooo-b", wait,
		func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error) {
			return lockcore.AcquireSetInOrder(ctx, rl, req)
		})
	if !errors.Is(err2, lockcore.ErrTaken) || after < wait*9/10 {
		t.Fatalf("out of order: S2 %v after %v; want its wait to run out in the deadlock", err2, after)
	}
	t.Logf("out of order: S2 %v after %v (deadlocked until its wait ran out), then S1 %v", err2, after, err1)
}

// setSoakStats are what a soak of random overlapping sets measured.
type setSoakStats struct {
	granted, refused int
	maxLate          time.Duration // the most an answer came after its wait (negative: before)
	longest          time.Duration // the longest a request took
	took             time.Duration
}

// setSoak runs clients that each take random sets of 2 to 8 of the names,
// with waits of 1 to 3 s, hold them a few milliseconds and release them,
// for d. It fails t when a member is granted to a set while another set
// holds it, or with a token not above its previous holder's.
func setSoak(t *testing.T, rl *lockcore.Redlock, acquire nodetest.SetAcquirer, clients, names int, d time.Duration) setSoakStats {
	t.Helper()
	var (
		mu     sync.Mutex
		holder = map[string]string{} // member → the set lease holding it, as granted
		last   = map[string]int64{}  // member → the last token granted
		st     = setSoakStats{maxLate: -time.Hour}
	)
	errs := make(chan error, clients)
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 42))
			for time.Now().Before(stop) {
				members := rnd.Perm(names)[:2+rnd.IntN(7)]
				req := lockcore.SetAcquireRequest{TTL: 10 * time.Second, Wait: time.Second + time.Duration(rnd.IntN(2000))*time.Millisecond}
				for _, m := range members {
					req.Resources = append(req.Resources, fmt.Sprintf("soak-%02d", m))
				}
				asked := time.Now()
				set, err := acquire(context.Background(), rl, req)
				took := time.Since(asked)
				mu.Lock()
				st.maxLate = max(st.maxLate, took-req.Wait)
				st.longest = max(st.longest, took)
				if err != nil {
					st.refused++
					mu.Unlock()
					if !errors.Is(err, lockcore.ErrTaken) {
						errs <- fmt.Errorf("client %d: %v", c, err)
						return
					}
					continue
				}
				st.granted++
				for _, l := range set.Members {
					if h := holder[l.Resource]; h != "" {
						mu.Unlock()
						errs <- fmt.Errorf("%s granted to a second set while another held it", l.Resource)
						return
					}
					if l.Token <= last[l.Resource] {
						mu.Unlock()
						errs <- fmt.Errorf("%s granted with token %d, not above the last one %d", l.Resource, l.Token, last[l.Resource])
						return
					}
					holder[l.Resource], last[l.Resource] = set.ID, l.Token
				}
				mu.Unlock()
				time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
				mu.Lock()
				for _, l := range set.Members {
					delete(holder, l.Resource)
				}
				mu.Unlock()
				if err := rl.ReleaseSet(context.Background(), lockcore.SetReleaseRequest{Resources: req.Resources, LeaseID: set.ID}); err != nil {
					errs <- fmt.Errorf("client %d: ReleaseSet: %v", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st.took = time.Since(start)
	return st
}

// TestOverlappingSetsUnderLoad: 16 clients take random overlapping sets
// of 2 to 8 of 20 names, with waits, for 5 s (LOCKGATE_SET_SOAK=60s for
// longer): no member is held by two sets at once, tokens per member grow,
// every request is answered within its wait (and the undo or extend that
// follows it), and no request runs out of its wait: a deadlock would.
func TestOverlappingSetsUnderLoad(t *testing.T) {
	d := 5 * time.Second
	if v := os.Getenv("LOCKGATE_SET_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	rl, err := lockcore.New(setMemNodes(3)(t), nodetest.SetOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	st := setSoak(t, rl, func(ctx context.Context, rl *lockcore.Redlock, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error) {
		return rl.AcquireSet(ctx, req)
	}, 16, 20, d)
	t.Logf("%d sets granted, %d refused in %v: %.0f sets/s; the longest request took %v (its answer %v after its wait)",
		st.granted, st.refused, st.took.Round(time.Millisecond), float64(st.granted)/st.took.Seconds(), st.longest, st.maxLate)
	if st.granted == 0 || st.refused > 0 {
		t.Errorf("%d granted, %d refused: a wait ran out", st.granted, st.refused)
	}
	if st.maxLate > 500*time.Millisecond {
		t.Errorf("an answer came %v after its wait", st.maxLate)
	}
}
