package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/unprotected"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// The majority-restart schedules run three nodes and two in-process
// gateways (Redlocks) whose quarantine lasts an hour, as -max-ttl's
// default makes it: a node that waited out a quarantine would not serve
// again within the test, so every grant after a restart of every node
// comes from rule 8 of lockcore's doc (a restart of a majority).
const (
	restartCheckEvery = 100 * time.Millisecond
	restartTTL        = time.Second // the load's leases
	restartClients    = 4           // two per gateway
)

// restartCluster starts one redis-server per fsync setting (AOF on,
// appendfsync always or everysec) and two gateways over them; hide makes
// every gateway's nodes hide their witnesses (rule 8's protection
// removed). It returns once both gateways find every node serving.
func restartCluster(t *testing.T, fsync []string, hide bool) ([]*redistest.Server, []*lockcore.Redlock) {
	t.Helper()
	srvs := make([]*redistest.Server, len(fsync))
	for i, f := range fsync {
		srvs[i] = redistest.Start(t, &redistest.Options{AOF: true, Args: []string{"--appendfsync", f}})
	}
	ctx := context.Background()
	var gws []*lockcore.Redlock
	for g := range 2 {
		var nodes []lockcore.Node
		for _, s := range srvs {
			n, err := redisnode.New(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close() })
			if hide {
				n.HideWitnesses(unprotected.Key{})
			}
			if g == 0 {
				if err := nodetest.Initialize(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			nodes = append(nodes, n)
		}
		rl, err := lockcore.New(nodes, &lockcore.Options{CheckInterval: restartCheckEvery, MaxTTL: time.Hour,
			NodeTimeout: 150 * time.Millisecond, MinTTL: 400 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rl.Close)
		if err := rl.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		gws = append(gws, rl)
	}
	waitUntil(t, "every node serving for both gateways", 10*time.Second, func() bool {
		for _, gw := range gws {
			for _, r := range gw.NodeReports() {
				if r.State != lockcore.NodeServing {
					return false
				}
			}
		}
		return true
	})
	return srvs, gws
}

// logNodes logs what each gateway reports of each node, and each node's
// record.
func logNodes(t *testing.T, gws []*lockcore.Redlock, read func() []lockcore.NodeHealth) {
	t.Helper()
	for g, gw := range gws {
		for i, r := range gw.NodeReports() {
			t.Logf("G%d: node %c %s: %s", g+1, 'A'+i, r.State, r.Reason)
		}
	}
	for i, h := range read() {
		t.Logf("node %c record: ID %.8s served at %d, durable %v, quarantined %v, lost %v (%s), witnessed %v",
			'A'+i, h.ID, h.ServedAt, h.Durable, h.Quarantined, h.Lost, h.Reason, h.Witnessed)
	}
}

// waitUntil polls cond every 5ms for up to d and fails t if it never held.
func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("set-up: %s not within %v", what, d)
		}
	}
}

// records reads each server's node record (rule 8) with a node of its
// own, outside the gateways.
func records(t *testing.T, srvs []*redistest.Server) func() []lockcore.NodeHealth {
	t.Helper()
	var nodes []*redisnode.Node
	for _, s := range srvs {
		n, err := redisnode.New(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	return func() []lockcore.NodeHealth {
		out := make([]lockcore.NodeHealth, len(nodes))
		for i, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			out[i], _ = n.Check(ctx)
			cancel()
		}
		return out
	}
}

// witnessedAll waits until every node's record is served (a ServedAt) and
// holds a witness of every other node's current data: a restart of all of
// them is then one rule 8 trusts.
func witnessedAll(t *testing.T, read func() []lockcore.NodeHealth) {
	t.Helper()
	waitUntil(t, "every node witnessed by the others", 10*time.Second, func() bool {
		hs := read()
		for i, h := range hs {
			if h.ID == "" || h.ServedAt <= 0 {
				return false
			}
			for j, o := range hs {
				if j != i && o.Witnessed[h.ID] <= 0 {
					return false
				}
			}
		}
		return true
	})
}

// restartLoad is the schedules' recorded workload: clients over both
// gateways, each in a loop acquiring one of two resources with a short
// TTL, writing its token to the fenced register, and releasing.
type restartLoad struct {
	rec *Recorder
	reg *Register
	gws []*lockcore.Redlock
}

// acquire asks gateway g for resource with lease and records the answer.
func (l *restartLoad) acquire(client, g int, resource, lease string, ttl time.Duration) (*lockcore.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e := Event{Client: client, Op: OpAcquire, Resource: resource, Lease: lease, TTL: ttl, Gateway: g, Invoke: l.rec.Now()}
	ls, err := l.gws[g].Acquire(ctx, lockcore.AcquireRequest{Resource: resource, LeaseID: lease, TTL: ttl})
	e.Complete, e.Outcome = l.rec.Now(), semOutcome(err)
	if err == nil {
		e.Token, e.ValidFor, e.Status = uint64(ls.Token), ls.Validity, 201
		if ls.Reentered {
			e.Status = 200
		}
	}
	l.rec.Add(e)
	return ls, err
}

// cycle is one client's acquire, write and release.
func (l *restartLoad) cycle(client, k int) {
	g := client % len(l.gws)
	res := fmt.Sprintf("r%d", (client+k)%2)
	lease := lockcore.NewLeaseID()
	ls, err := l.acquire(client, g, res, lease, restartTTL)
	if err != nil {
		return
	}
	value := fmt.Sprintf("%d@%d", client, k)
	w := Event{Client: client, Op: OpWrite, Resource: res, Lease: lease, Token: uint64(ls.Token), Value: value, Gateway: -1, Invoke: l.rec.Now()}
	err = l.reg.Write(context.Background(), res, lease, w.Token, value, w.Invoke)
	w.Complete, w.Outcome, w.Stale = l.rec.Now(), semOutcome(err), errors.Is(err, fencing.ErrStaleToken)
	l.rec.Add(w)
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r := Event{Client: client, Op: OpRelease, Resource: res, Lease: lease, Gateway: g, Invoke: l.rec.Now()}
	err = l.gws[g].Release(ctx, lockcore.ReleaseRequest{Resource: res, LeaseID: lease})
	r.Complete, r.Outcome = l.rec.Now(), semOutcome(err)
	if err == nil {
		r.Status = 204
	}
	l.rec.Add(r)
}

// run starts the clients; the returned stop ends them and waits.
func (l *restartLoad) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range restartClients {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				l.cycle(c, k)
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// grantTimes returns when each Ok acquire completed, in order.
func grantTimes(events []Event) []time.Duration {
	var out []time.Duration
	for _, e := range events {
		if e.Op == OpAcquire && e.Outcome == Ok {
			out = append(out, e.Complete)
		}
	}
	slices.Sort(out)
	return out
}

// firstGrantAfter returns how long after at the first acquire invoked at
// or after it was granted, or false.
func firstGrantAfter(events []Event, at time.Duration) (time.Duration, bool) {
	best, ok := time.Duration(0), false
	for _, e := range events {
		if e.Op == OpAcquire && e.Outcome == Ok && e.Invoke >= at && (!ok || e.Complete-at < best) {
			best, ok = e.Complete-at, true
		}
	}
	return best, ok
}

// longestNoGrant is the longest stretch between two grants (the run's
// first and last grants bound it).
func longestNoGrant(events []Event) (gap, at time.Duration) {
	ts := grantTimes(events)
	for i := 1; i < len(ts); i++ {
		if d := ts[i] - ts[i-1]; d > gap {
			gap, at = d, ts[i-1]
		}
	}
	return gap, at
}

// killAll kills every server, then brings each back: restore[i], when
// set, first replaces server i's append-only files by that copy.
func killAll(t *testing.T, srvs []*redistest.Server, restore []string) {
	t.Helper()
	for _, s := range srvs {
		s.Kill()
	}
	for i, s := range srvs {
		if i < len(restore) && restore[i] != "" {
			aof := filepath.Join(s.Dir(), "appendonlydir")
			if err := os.RemoveAll(aof); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(aof, os.DirFS(restore[i])); err != nil {
				t.Fatal(err)
			}
		}
		s.Restart()
	}
}

// TestMajorityRestartSchedule is a restart of a majority (rule 8 of
// lockcore's doc) as a schedule: three nodes on appendfsync always and
// two gateways whose quarantine lasts an hour, under four clients that
// acquire (TTL 1s), write their token to the fenced register and release.
// Three times, once every node's record holds the others' witnesses,
// every node is killed and then every node restarted, with the load going.
// The cluster must grant again within 10 s of each restart (a quarantine
// would grant nothing more), and the mutex and store models must accept
// the history: the locks held across a restart stay held, tokens go on
// from their highest.
func TestMajorityRestartSchedule(t *testing.T) {
	srvs, gws := restartCluster(t, []string{"always", "always", "always"}, false)
	read := records(t, srvs)
	load := &restartLoad{rec: NewRecorder(), reg: NewRegister(), gws: gws}
	stop := load.run()
	defer stop()
	var back []time.Duration
	for k := range 3 {
		time.Sleep(500 * time.Millisecond)
		witnessedAll(t, read)
		killed := load.rec.Now()
		killAll(t, srvs, nil)
		up := load.rec.Now()
		took, ok := time.Duration(0), false
		for end := time.Now().Add(10 * time.Second); !ok && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			took, ok = firstGrantAfter(load.rec.Events(), up)
		}
		if !ok {
			logNodes(t, gws, read)
			t.Fatalf("restart %d: no grant within 10s of every node answering again", k+1)
		}
		t.Logf("restart %d: every node killed at %v, every one answering again %v later; first grant %v after that",
			k+1, killed.Round(time.Millisecond), (up - killed).Round(time.Millisecond), took.Round(time.Millisecond))
		back = append(back, took)
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	events := load.rec.Events()
	gap, at := longestNoGrant(events)
	t.Logf("%d grants; longest stretch without a grant %v (from %v); first grants after the restarts %v",
		len(grantTimes(events)), gap.Round(time.Millisecond), at.Round(time.Millisecond), back)
	reportModels(t, CheckModels(events, 0))
}

// TestRestoresDuringAMajorityRestartSchedule is a restore hidden in a
// restart of a majority (rule 8's witnesses) as a schedule: nodes A and B
// on appendfsync always, C on everysec (never Durable, so never whole by
// its own record), two gateways, the load of TestMajorityRestartSchedule.
//
//  1. Once every node's record holds the others' witnesses, A's and B's
//     append-only files are copied (one moment, for both).
//  2. L1 is granted (TTL 15s), and the load goes on, raising the tokens.
//  3. C's record witnesses A and B served later than their copies.
//  4. Every node is killed; A and B come back from their copies, without
//     L1 and with their counters of step 1, C from its own files.
//  5. For 3 s a contender asks for L1's resource through the other
//     gateway, while the load goes on.
//
// A and B look like a restart of two durable nodes, a quorum; only C's
// witnesses tell they are copies. With them, no node is whole and the
// cluster waits out the quarantine: the models accept the history. With
// every gateway's nodes hiding their witnesses, A and B recover from each
// other and serve without L1: the mutex model must reject the history
// (the contender granted while L1 holds, or a token below one granted
// before).
func TestRestoresDuringAMajorityRestartSchedule(t *testing.T) {
	for _, hide := range []bool{false, true} {
		name := "witnesses heard"
		if hide {
			name = "witnesses hidden"
		}
		if !t.Run(name, func(t *testing.T) { playRestores(t, hide) }) {
			return
		}
	}
}

func playRestores(t *testing.T, hide bool) {
	srvs, gws := restartCluster(t, []string{"always", "always", "everysec"}, hide)
	read := records(t, srvs)
	load := &restartLoad{rec: NewRecorder(), reg: NewRegister(), gws: gws}
	stop := load.run()
	defer stop()
	time.Sleep(500 * time.Millisecond)
	witnessedAll(t, read) // 1
	copies := make([]string, 2)
	for i := range copies {
		copies[i] = filepath.Join(t.TempDir(), "aof")
		if err := os.CopyFS(copies[i], os.DirFS(filepath.Join(srvs[i].Dir(), "appendonlydir"))); err != nil {
			t.Fatal(err)
		}
	}
	copied := read()                                                                                // no older than the copies
	l1, err := load.acquire(restartClients, 0, "held", "l1-"+lockcore.NewLeaseID(), 15*time.Second) // 2
	if err != nil {
		t.Fatal("set-up: L1 not granted:", err)
	}
	waitUntil(t, "C witnessing A and B served after their copies", 5*time.Second, func() bool { // 3
		c := read()[2]
		return c.Witnessed[copied[0].ID] > copied[0].ServedAt && c.Witnessed[copied[1].ID] > copied[1].ServedAt
	})
	time.Sleep(300 * time.Millisecond) // the load's grants since the copies
	killAll(t, srvs, copies)           // 4
	up := load.rec.Now()
	var l2 *lockcore.Lease
	for load.rec.Now() < up+3*time.Second && l2 == nil { // 5
		l2, _ = load.acquire(restartClients+1, 1, "held", "l2-"+lockcore.NewLeaseID(), restartTTL)
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	logNodes(t, gws, read)
	events := load.rec.Events()
	after, ok := firstGrantAfter(events, up)
	var l2Token int64
	if l2 != nil {
		l2Token = l2.Token
	}
	t.Logf("L1 token %d; contender granted: %v (token %d); first grant after the restart: %v (%v)", l1.Token, l2 != nil, l2Token, ok, after.Round(time.Millisecond))
	for _, res := range []string{"r0", "r1"} {
		var before, back uint64 // the highest token granted before the restart; the grants after it below that
		var after int
		for _, e := range events {
			switch {
			case e.Op != OpAcquire || e.Outcome != Ok || e.Resource != res:
			case e.Invoke < up:
				before = max(before, e.Token)
			default:
				after++
				if e.Token <= before {
					back++
				}
			}
		}
		t.Logf("%s: highest token before the restart %d; %d grants after it, %d of them not above it", res, before, after, back)
	}
	results := CheckModels(events, 0)
	if !hide {
		if l2 != nil {
			t.Errorf("the contender got L1's lock (token %d) while L1 (token %d) held it", l2.Token, l1.Token)
		}
		reportModels(t, results)
		return
	}
	for _, r := range results {
		t.Logf("%v", r)
	}
	expectIllegal(t, results, "mutex")
}
