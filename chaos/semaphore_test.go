package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

// SemaphoreEnv sets how long TestSemaphoreNeverAdmitsMoreThanK runs (a Go
// duration, e.g. 30s). Default semShort, so that the suite stays short.
const SemaphoreEnv = "LOCKGATE_CHAOS_SEMAPHORE"

const (
	semShort       = 3 * time.Second
	semK           = 3
	semContenders  = 20
	semTTL         = 500 * time.Millisecond
	semWait        = time.Second
	semRegrantSlop = 2 * time.Second // a dead holder's permit is granted again within its validity and this
)

// semGrant is one permit a contender held: its window is [start, end),
// from the acquisition's answer to the release's sending or the end of
// the validity (counted from when the acquisition or extension was sent).
type semGrant struct {
	lease      string
	permit     int
	token      int64
	start, end time.Duration
	abandoned  bool // the holder "died": no release
}

// semWrite is one write a holder made to the fenced store, keyed by
// permit, while it held the permit (inWindow) or not.
type semWrite struct {
	permit   int
	lease    string
	token    int64
	at       time.Duration
	inWindow bool
	admitted bool
}

// checkSemaphore returns the violations of the semaphore's properties:
//
//	S1  at no moment more than k windows overlap (holders at once)
//	S2  per permit, windows never overlap and tokens rise with the
//	    windows' order (two leases never share a token)
//	S3  the store fenced per permit admitted every write made in a window
//	S4  a permit whose holder died is granted again within its validity
//	    plus slop (checked when that is before runEnd)
func checkSemaphore(k int, grants []semGrant, writes []semWrite, runEnd, slop time.Duration) []string {
	var out []string
	out = append(out, checkAtMostK(k, grants)...)
	out = append(out, checkPerPermit(grants)...)
	for _, w := range writes {
		if w.inWindow && !w.admitted {
			out = append(out, fmt.Sprintf("S3 permit %d: the write of token %d at %v, within its holder's window, was refused", w.permit, w.token, w.at))
		}
	}
	out = append(out, checkRegranted(grants, runEnd, slop)...)
	return out
}

func checkAtMostK(k int, grants []semGrant) []string {
	type edge struct {
		at    time.Duration
		delta int
	}
	var edges []edge
	for _, g := range grants {
		if g.end > g.start {
			edges = append(edges, edge{g.start, 1}, edge{g.end, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // an end before a start at the same moment
	})
	var out []string
	n := 0
	for _, e := range edges {
		n += e.delta
		if n > k && e.delta > 0 {
			out = append(out, fmt.Sprintf("S1 %d holders at once at %v (k=%d)", n, e.at, k))
		}
	}
	return out
}

func checkPerPermit(grants []semGrant) []string {
	byPermit := map[int][]semGrant{}
	for _, g := range grants {
		byPermit[g.permit] = append(byPermit[g.permit], g)
	}
	var out []string
	for p, gs := range byPermit {
		slices.SortFunc(gs, func(a, b semGrant) int { return int(a.start - b.start) })
		for i := 1; i < len(gs); i++ {
			prev, cur := gs[i-1], gs[i]
			if cur.start < prev.end {
				out = append(out, fmt.Sprintf("S2 permit %d: tokens %d and %d held at once (%v < %v)", p, prev.token, cur.token, cur.start, prev.end))
			}
			if cur.token <= prev.token {
				out = append(out, fmt.Sprintf("S2 permit %d: token %d after token %d", p, cur.token, prev.token))
			}
		}
	}
	return out
}

func checkRegranted(grants []semGrant, runEnd, slop time.Duration) []string {
	var out []string
	for _, d := range grants {
		if !d.abandoned || d.end+slop > runEnd {
			continue
		}
		found := false
		for _, g := range grants {
			if g.permit == d.permit && g.lease != d.lease && g.start >= d.start && g.start <= d.end+slop {
				found = true
				break
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("S4 permit %d: lost after its holder (token %d) died at %v", d.permit, d.token, d.start))
		}
	}
	return out
}

func TestCheckSemaphore(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	g := func(p int, tok int64, from, to int) semGrant {
		return semGrant{lease: "l" + strconv.FormatInt(tok, 10), permit: p, token: tok, start: ms(from), end: ms(to)}
	}
	dead := func(s semGrant) semGrant { s.abandoned = true; return s }
	for _, tc := range []struct {
		name   string
		grants []semGrant
		writes []semWrite
		want   string
	}{
		{"k holders on k permits", []semGrant{g(0, 1, 0, 10), g(1, 1, 0, 10), g(0, 2, 10, 20)}, nil, ""},
		{"k+1 holders at once", []semGrant{g(0, 1, 0, 10), g(1, 1, 0, 10), g(0, 2, 5, 20)}, nil, "S1"},
		{"one permit held twice", []semGrant{g(0, 1, 0, 10), g(0, 2, 5, 20)}, nil, "S2"},
		{"a token going back", []semGrant{g(0, 5, 0, 10), g(0, 4, 10, 20)}, nil, "S2"},
		{"a refused write in a window", nil, []semWrite{{permit: 0, token: 3, inWindow: true}}, "S3"},
		{"a refused write after the window", nil, []semWrite{{permit: 0, token: 3}}, ""},
		{"a dead holder's permit taken again", []semGrant{dead(g(0, 1, 0, 10)), g(0, 2, 1500, 1600)}, nil, ""},
		{"a dead holder's permit never taken again", []semGrant{dead(g(0, 1, 0, 10)), g(0, 2, 3000, 3100)}, nil, "S4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkSemaphore(2, tc.grants, tc.writes, 10*time.Second, semRegrantSlop)
			if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) == 0 || got[0][:2] != tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

// permitter is what a contender needs of a semaphore implementation.
type permitter interface {
	acquire(ctx context.Context, owner string) (semGrant, time.Duration, error) // the grant and its validity
	extend(ctx context.Context, g semGrant) (time.Duration, error)
	release(ctx context.Context, g semGrant) error
}

// semRun is one run's record: the grants and writes for checkSemaphore,
// and every operation in rec for the model checker.
type semRun struct {
	rec *Recorder
	reg *fencing.Memory

	mu     sync.Mutex
	grants []semGrant
	writes []semWrite
	leases map[string]string // lease key → lease id, for release
}

func (r *semRun) now() time.Duration { return r.rec.Now() }

// semOutcome is what a contender learnt from err: a call cut short by its
// context may have taken effect; any other error is a refusal.
func semOutcome(err error) Outcome {
	switch {
	case err == nil:
		return Ok
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Unknown
	}
	return Fail
}

// op records one permit operation of contender id on g's permit.
func (r *semRun) op(id int, op Op, g semGrant, invoke time.Duration, valid time.Duration, err error) {
	if op == OpPermitAcquire && err != nil {
		g.permit = -1 // no answer named one
	}
	r.rec.Add(Event{Client: id, Op: op, Resource: "jobs", Lease: g.lease, Token: uint64(g.token), Permit: g.permit,
		Permits: semK, TTL: semTTL, ValidFor: valid, Invoke: invoke, Complete: r.now(), Outcome: semOutcome(err), Gateway: -1})
}

// write puts token into the store under the permit's key, recording
// whether it was made within end and admitted.
func (r *semRun) write(g semGrant, end time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.now()
	key := "permit-" + strconv.Itoa(g.permit) // the fence is per permit
	err := r.reg.Put(context.Background(), key, key, uint64(g.token), []byte(g.lease))
	r.writes = append(r.writes, semWrite{permit: g.permit, lease: g.lease, token: g.token, at: at, inWindow: at < end, admitted: err == nil})
	e := Event{Client: -1, Op: OpWrite, Resource: key, Lease: g.lease, Token: uint64(g.token), Invoke: at, Complete: r.now(), Gateway: -1}
	switch {
	case errors.Is(err, fencing.ErrStaleToken):
		e.Outcome, e.Stale = Fail, true
	case err != nil:
		e.Outcome = Fail // never judged (not Stale)
	}
	r.rec.Add(e)
}

func (r *semRun) record(g semGrant) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants = append(r.grants, g)
}

// contend acquires, writes, sometimes extends, and releases or dies, until
// ctx ends.
func (r *semRun) contend(ctx context.Context, p permitter, id int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	for ctx.Err() == nil {
		invoke := r.now()
		g, validity, err := p.acquire(ctx, "c"+strconv.Itoa(id))
		r.op(id, OpPermitAcquire, g, invoke, validity, err)
		if err != nil {
			if !errors.Is(err, semaphore.ErrFull) {
				time.Sleep(5 * time.Millisecond) // no quorum now: do not spin
			}
			continue
		}
		g.start, g.end = r.now(), invoke+validity
		r.write(g, g.end)
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) // the work
		if rng.IntN(3) == 0 {
			ext := r.now()
			v, err := p.extend(ctx, g)
			r.op(id, OpPermitExtend, g, ext, v, err)
			if err == nil {
				g.end = max(g.end, ext+v)
			}
		}
		r.write(g, g.end)
		if rng.IntN(10) == 0 || ctx.Err() != nil {
			g.abandoned = true // dies holding the permit
			r.record(g)
			continue
		}
		g.end = min(g.end, r.now())
		r.record(g)
		rel := r.now()
		r.op(id, OpPermitRelease, g, rel, 0, p.release(context.WithoutCancel(ctx), g))
	}
}

// slotPermits are the permits of package semaphore, through one of two
// replicas (Redlocks over their own connections to the nodes).
type slotPermits struct {
	sems *semaphore.Semaphores
	mu   sync.Mutex
	ids  map[string]string
}

func (s *slotPermits) acquire(ctx context.Context, owner string) (semGrant, time.Duration, error) {
	p, err := s.sems.Acquire(ctx, semaphore.AcquireRequest{Name: "jobs", Permits: semK, TTL: semTTL, Wait: semWait, Owner: owner})
	if err != nil {
		return semGrant{}, 0, err
	}
	key := strconv.Itoa(p.Index) + "/" + strconv.FormatInt(p.Token, 10)
	s.mu.Lock()
	s.ids[key] = p.ID
	s.mu.Unlock()
	return semGrant{lease: key, permit: p.Index, token: p.Token}, p.Validity, nil
}

func (s *slotPermits) id(g semGrant) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[g.lease]
}

func (s *slotPermits) extend(ctx context.Context, g semGrant) (time.Duration, error) {
	p, err := s.sems.Extend(ctx, "jobs", g.permit, s.id(g), 0, g.token)
	if err != nil {
		return 0, err
	}
	return p.Validity, nil
}

func (s *slotPermits) release(ctx context.Context, g semGrant) error {
	return s.sems.Release(ctx, "jobs", g.permit, s.id(g), g.token)
}

// naiveCounter is the unsafe construction the issue warns of: each node
// counts the holders it granted (a sorted set of leases by expiry) and
// grants while it counts fewer than K; a majority of grants is a permit.
// Tokens are the highest of the granting nodes' counters. It has no
// permits: its holders all write under permit 0.
type naiveCounter struct {
	nodes []*redis.Client
}

var naiveAcquire = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1] + ARGV[2], ARGV[4])
  return redis.call('INCR', KEYS[2])
end
return 0`)

func (n *naiveCounter) acquire(ctx context.Context, _ string) (semGrant, time.Duration, error) {
	lease := lockcore.NewLeaseID()
	start := time.Now()
	tokens := make([]int64, len(n.nodes))
	var wg sync.WaitGroup
	for i, c := range n.nodes {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			tok, err := naiveAcquire.Run(cctx, c, []string{"naive:holders", "naive:tokens"},
				time.Now().UnixMilli(), semTTL.Milliseconds(), semK, lease).Int64()
			if err == nil {
				tokens[i] = tok
			}
		})
	}
	wg.Wait()
	granted, token := 0, int64(0)
	for _, t := range tokens {
		if t > 0 {
			granted++
			token = max(token, t)
		}
	}
	g := semGrant{lease: lease, token: token}
	if granted < len(n.nodes)/2+1 {
		_ = n.release(context.WithoutCancel(ctx), g)
		time.Sleep(time.Millisecond) // as a waiter would, without a waiting room
		return semGrant{}, 0, semaphore.ErrFull
	}
	return g, semTTL - time.Since(start) - semTTL/100 - 2*time.Millisecond, nil
}

func (n *naiveCounter) extend(context.Context, semGrant) (time.Duration, error) {
	return 0, errors.New("naive: no extend")
}

func (n *naiveCounter) release(ctx context.Context, g semGrant) error {
	for _, c := range n.nodes {
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		c.ZRem(cctx, "naive:holders", g.lease)
		cancel()
	}
	return nil
}

// semCluster is three redis-servers (AOF everysec: a killed node restarts
// with its data, up to its last second) and two Redlock replicas over
// them.
type semCluster struct {
	servers  []*redistest.Server
	replicas []*lockcore.Redlock
}

// quietRedis drops go-redis's own log lines (failed dials while the
// nemesis has a node down).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func startSemCluster(t *testing.T) *semCluster {
	redis.SetLogger(quietRedis{})
	// AOF with everysec, as the fault suite runs its nodes: a kill may lose
	// the last second of writes, which the gateway must detect and repair.
	c := &semCluster{servers: redistest.StartN(t, 3, &redistest.Options{AOF: true, Args: []string{"--appendfsync", "everysec"}})}
	for r := range 2 {
		var nodes []lockcore.Node
		for _, s := range c.servers {
			n, err := redisnode.New(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			if r == 0 {
				if err := nodetest.Initialize(context.Background(), n); err != nil {
					t.Fatal(err)
				}
			}
			nodes = append(nodes, n)
		}
		rl, err := lockcore.New(nodes, &lockcore.Options{CheckInterval: 100 * time.Millisecond, MaxTTL: 10 * time.Second,
			NodeTimeout: 150 * time.Millisecond, MinTTL: 400 * time.Millisecond}) // room for a loaded machine
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rl.Close)
		// The first operation starts the replica's guard, which watches
		// the nodes from then on.
		if _, err := rl.Inspect(context.Background(), "warm-up"); !errors.Is(err, lockcore.ErrNotHeld) {
			t.Fatal(err)
		}
		c.replicas = append(c.replicas, rl)
	}
	return c
}

// serving reports whether both replicas have every node in service.
func (c *semCluster) serving() bool {
	for _, rl := range c.replicas {
		for _, rep := range rl.NodeReports() {
			if rep.State != lockcore.NodeServing {
				return false
			}
		}
	}
	return true
}

// nemesis kills (and restarts) or pauses (and resumes) one node at a time,
// waiting for every node to serve again before the next fault, until
// deadline, and at least twice. It runs on the test goroutine (redistest
// fails t).
func (c *semCluster) nemesis(t *testing.T, rng *rand.Rand, deadline time.Time) (faults int) {
	for faults < 2 || time.Now().Before(deadline) {
		s := c.servers[rng.IntN(len(c.servers))]
		down := time.Duration(100+rng.IntN(400)) * time.Millisecond
		if rng.IntN(2) == 0 {
			s.Kill()
			time.Sleep(down) // the fault's length, not a check
			s.Restart()
		} else {
			s.Pause()
			time.Sleep(down)
			s.Resume()
		}
		faults++
		began := time.Now()
		healed := began.Add(30 * time.Second)
		for !c.serving() {
			if time.Now().After(healed) {
				t.Fatalf("nodes not all serving 30 s after fault %d", faults)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("fault %d (%v down) healed in %v", faults, down, time.Since(began).Round(time.Millisecond))
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	}
	return faults
}

func semDuration(t *testing.T) time.Duration {
	v := os.Getenv(SemaphoreEnv)
	if v == "" {
		return semShort
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", SemaphoreEnv, v, err)
	}
	return d
}

// runSemaphore runs semContenders contenders against p while the nemesis
// faults the cluster for d, and returns the record.
func runSemaphore(t *testing.T, c *semCluster, p func(i int) permitter, d time.Duration, seed uint64) (*semRun, int) {
	run := &semRun{rec: NewRecorder(), reg: fencing.NewMemory()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range semContenders {
		wg.Go(func() { run.contend(ctx, p(i), i, seed) })
	}
	faults := c.nemesis(t, rand.New(rand.NewPCG(seed, 0)), time.Now().Add(d))
	cancel()
	wg.Wait()
	return run, faults
}

// TestSemaphoreNeverAdmitsMoreThanK: K = 3, 20 contenders through two
// replicas on 3 nodes, while nodes are killed and paused. The permits never
// have more than 3 holders, never two on one permit, each permit's tokens
// rise, the store fenced per permit admits every holder's write, and a
// permit whose holder died is taken again within its TTL. At the end, all
// holders gone without releasing, the 3 permits are free again within the
// TTL. LOCKGATE_CHAOS_SEMAPHORE=30s runs it longer.
func TestSemaphoreNeverAdmitsMoreThanK(t *testing.T) {
	c := startSemCluster(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	sems := []*semaphore.Semaphores{semaphore.New(c.replicas[0]), semaphore.New(c.replicas[1])}
	run, faults := runSemaphore(t, c, func(i int) permitter {
		return &slotPermits{sems: sems[i%2], ids: map[string]string{}}
	}, semDuration(t), seed)
	runEnd := run.now()
	if len(run.grants) < 20 || faults < 2 {
		t.Fatalf("only %d grants and %d faults: the run proves nothing", len(run.grants), faults)
	}
	abandoned := 0
	for _, g := range run.grants {
		if g.abandoned {
			abandoned++
		}
	}
	t.Logf("%d grants (%d holders died), %d writes, %d faults in %v", len(run.grants), abandoned, len(run.writes), faults, runEnd.Round(time.Millisecond))
	for _, v := range checkSemaphore(semK, run.grants, run.writes, runEnd, semRegrantSlop) {
		t.Error(v)
	}
	reportModels(t, CheckModels(run.rec.Events(), semK))

	// Every contender is gone; those that held a permit never released it.
	deadline := time.Now().Add(semTTL + semRegrantSlop)
	for i := range semK {
		_, err := sems[i%2].Acquire(context.Background(), semaphore.AcquireRequest{Name: "jobs", Permits: semK, TTL: 10 * time.Second, Wait: time.Until(deadline)})
		if err != nil {
			t.Fatalf("permit %d of %d after every holder died: %v (a permit was lost)", i+1, semK, err)
		}
	}
}

// TestNaiveCounterAdmitsMoreThanK runs the naive per-node counter through
// the same contenders, faults and checker: it admits more than K holders at
// once. This shows the checker can fail, and why the permits are K locks.
func TestNaiveCounterAdmitsMoreThanK(t *testing.T) {
	c := startSemCluster(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var clients []*redis.Client
	for _, s := range c.servers {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { cl.Close() })
		clients = append(clients, cl)
	}
	naive := &naiveCounter{nodes: clients}
	run, _ := runSemaphore(t, c, func(int) permitter { return naive }, semShort, seed)
	s1 := 0
	for _, v := range checkAtMostK(semK, run.grants) {
		if s1 == 0 {
			t.Logf("as expected: %s", v)
		}
		s1++
	}
	t.Logf("%d grants, %d S1 violations", len(run.grants), s1)
	if s1 == 0 {
		t.Fatalf("the naive counter never admitted more than %d holders in %d grants", semK, len(run.grants))
	}
}
