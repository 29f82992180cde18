package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// rwGrant is one hold a contender had on the readers-writer lock: sent at
// invoke, answered at start, held until end (the release's sending, or
// the end of the validity counted from when the acquisition or the last
// extension was sent).
type rwGrant struct {
	exclusive          bool
	token              int64
	invoke, start, end time.Duration
	abandoned          bool
}

// checkRW returns the violations of the readers-writer lock's properties:
//
//	RW1  no writer's window overlaps another hold's (reader or writer)
//	RW2  a writer's token is above the token of every hold answered before
//	     the writer's acquisition was sent
func checkRW(grants []rwGrant) []string {
	gs := slices.Clone(grants)
	slices.SortFunc(gs, func(a, b rwGrant) int { return int(a.start - b.start) })
	var out []string
	for i, w := range gs {
		if !w.exclusive {
			continue
		}
		for j, g := range gs {
			if i == j || g.end <= g.start || w.end <= w.start {
				continue
			}
			if g.start < w.end && w.start < g.end {
				kind := "reader"
				if g.exclusive {
					kind = "writer"
				}
				out = append(out, fmt.Sprintf("RW1 writer %d [%v, %v) beside %s %d [%v, %v)", w.token, w.start, w.end, kind, g.token, g.start, g.end))
			}
			if g.start < w.invoke && g.token >= w.token {
				out = append(out, fmt.Sprintf("RW2 writer %d sent at %v, not above token %d answered at %v", w.token, w.invoke, g.token, g.start))
			}
		}
	}
	return out
}

func TestCheckRW(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	r := func(tok int64, from, to int) rwGrant {
		return rwGrant{token: tok, invoke: ms(from), start: ms(from), end: ms(to)}
	}
	w := func(tok int64, from, to int) rwGrant { g := r(tok, from, to); g.exclusive = true; return g }
	for _, tc := range []struct {
		name   string
		grants []rwGrant
		want   string
	}{
		{"readers together, then a writer above them", []rwGrant{r(1, 0, 10), r(2, 5, 15), w(3, 15, 20), r(4, 20, 30)}, ""},
		{"a writer beside a reader", []rwGrant{r(1, 0, 10), w(2, 5, 15)}, "RW1"},
		{"two writers at once", []rwGrant{w(1, 0, 10), w(2, 5, 15)}, "RW1"},
		{"a writer's token below an earlier reader's", []rwGrant{r(5, 0, 10), w(4, 20, 30)}, "RW2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkRW(tc.grants)
			if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) == 0 || got[0][:3] != tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

const (
	rwContenders = 12
	rwTTL        = 500 * time.Millisecond
	rwWait       = time.Second
)

// rwRun is one run's record.
type rwRun struct {
	began  time.Time
	mu     sync.Mutex
	grants []rwGrant
}

func (r *rwRun) now() time.Duration { return time.Since(r.began) }

// contend takes a reader's or the writer's hold (one in four a writer),
// works, sometimes extends, and releases or dies, until ctx ends.
func (r *rwRun) contend(ctx context.Context, rl *lockcore.Redlock, id int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	for ctx.Err() == nil {
		g := rwGrant{exclusive: rng.IntN(4) == 0, invoke: r.now()}
		l, err := rl.AcquireRW(ctx, lockcore.RWAcquireRequest{Name: "ledger", Exclusive: g.exclusive, TTL: rwTTL, Wait: rwWait,
			Owner: "c" + strconv.Itoa(id)})
		if err != nil {
			if !errors.Is(err, lockcore.ErrTaken) {
				time.Sleep(5 * time.Millisecond) // no quorum now: do not spin
			}
			continue
		}
		g.token, g.start, g.end = l.Token, r.now(), g.invoke+l.Validity
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) // the work
		if rng.IntN(3) == 0 {
			ext := r.now()
			if e, err := rl.ExtendRW(ctx, lockcore.RWExtendRequest{Name: "ledger", LeaseID: l.ID}); err == nil {
				g.end = max(g.end, ext+e.Validity)
			}
		}
		if rng.IntN(10) == 0 || ctx.Err() != nil {
			g.abandoned = true // dies holding the lock
		} else {
			g.end = min(g.end, r.now())
		}
		r.mu.Lock()
		r.grants = append(r.grants, g)
		r.mu.Unlock()
		if !g.abandoned {
			_ = rl.ReleaseRW(context.WithoutCancel(ctx), lockcore.RWReleaseRequest{Name: "ledger", LeaseID: l.ID})
		}
	}
}

// TestNoReaderBesideAWriterUnderFaults: 12 contenders, one in four a
// writer, through two replicas on 3 nodes while nodes are killed (AOF
// everysec: a kill may lose the last second) and paused. No writer's
// window overlaps another hold's, and every writer's token is above every
// earlier holder's. LOCKGATE_CHAOS_SEMAPHORE sets the length, as for the
// semaphore's run.
func TestNoReaderBesideAWriterUnderFaults(t *testing.T) {
	c := startSemCluster(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	run := &rwRun{began: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range rwContenders {
		wg.Go(func() { run.contend(ctx, c.replicas[i%2], i, seed) })
	}
	faults := c.nemesis(t, rand.New(rand.NewPCG(seed, 0)), time.Now().Add(semDuration(t)))
	cancel()
	wg.Wait()
	writers := 0
	for _, g := range run.grants {
		if g.exclusive {
			writers++
		}
	}
	t.Logf("%d holds (%d writers), %d faults in %v", len(run.grants), writers, faults, run.now().Round(time.Millisecond))
	if writers < 3 || len(run.grants)-writers < 3 || faults < 2 {
		t.Fatalf("only %d writers, %d readers and %d faults: the run proves nothing", writers, len(run.grants)-writers, faults)
	}
	for _, v := range checkRW(run.grants) {
		t.Error(v)
	}
}
