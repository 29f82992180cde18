package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
)

// Fault kinds. Every profile injects each at least once.
const (
	kindKill9       = "kill9-aof-restart"
	kindEmpty       = "restart-empty"
	kindStop        = "sigstop"
	kindDelay       = "proxy-delay"
	kindDropReplies = "proxy-drop-replies"
	kindCut         = "proxy-cut"
	kindGwKill      = "gateway-kill"
	kindGwPause     = "gateway-pause"
	kindClientPause = "client-pause"
	kindLag         = "episode-lag" // two nodes paused while episode resources advance
	kindLastCurrent = "episode-pause-last-current"
	kindLiveHolder  = "episode-live-holder" // three nodes restart empty, one after another, under a live holder
	// A node goes back to a copy of its data taken a TTL or two before (a
	// restore from backup): a new server process with older data.
	kindRestore = "restore-older-copy"
	// A node's AOF is cut back to what it held a TTL before, as a host
	// crash leaves an appendfsync everysec node that had not synced its
	// tail; the process restarts from it.
	kindTailLoss = "tail-loss"
	// A proxied node's address switches, its connections cut, to a new
	// server process holding the node's data of a TTL or two before: a
	// managed Redis failing over to a lagging replica behind a fixed
	// endpoint.
	kindFailover = "failover-lagging-replica"
	// Every gateway is killed at once and started again (a deploy).
	kindGwAll = "restart-every-gateway"
	// One gateway's own link to node 2 is slowed (its replies to 20 KB/s:
	// small replies pass, a read of the slot counters takes seconds); a
	// node restarts empty; once another gateway serves it again and the
	// load had half a TTL on it, its host crashes with the AOF cut back
	// to what it held when it began serving; half a TTL later the link
	// heals. The slowed gateway's recovery, on reads made before, is
	// still under way.
	kindSlowLink = "slow-recovery-link"
	// A node restarts empty and, as soon as a gateway's metrics show it
	// lost or quarantined, is killed and restarted again from its AOF,
	// which holds the recovery's quarantine under way.
	kindRecovering = "restart-during-recovery"
	// A proxied node's proxy keeps its clients' connections open and dials
	// the new server behind them; the node restarts from a copy of its
	// data taken a TTL or two before, so the gateways' pooled connections
	// reach the new process with no new connection.
	kindKeepProxy = "keeping-proxy"
	// A node's wall clock runs fast by half the gateways' drift allowance
	// (DriftFactor 1 %: 0.5 %) for two TTLs, then at real speed again,
	// ahead by what it gained, as a drifting host clock that NTP slews:
	// its copies of locks expire early, within what the validity sets
	// aside. Within lockgate's stated model (RELIABILITY.md's clock
	// assumptions); a clock stepped past the allowance is not (below).
	kindClockDrift = "clock-drift"
	// A node's wall clock steps clockStep ahead (an NTP step, a VM
	// resumed), far past the drift allowance, and a TTL later back: its
	// copies of locks taken in the TTL before the first step expire early,
	// those taken between the steps late. Outside lockgate's stated model
	// (Fault.Outside): its window is checked, and what is found there is
	// counted apart.
	kindClockStep = "clock-step-outside-model"
	// The primary of the node that Redis Sentinel manages is killed and
	// the Sentinel made to fail over to its replica at once (SENTINEL
	// FAILOVER): the gateways, which reach the node through the Sentinel,
	// meet a new server process with what the replica had received. The
	// old primary restarts from its AOF as the new one's replica.
	kindSentinel = "sentinel-failover"
	// Node 0 dies for good and is replaced by a new, empty server, one
	// node at a time: every gateway, one after another, restarts with a
	// list without node 0 (four nodes), then every gateway, one after
	// another, with the new server in its place (five), as an operator's
	// rolling restarts would do. Any quorum of a list and of the next one
	// share a node; the new server is recovered from the others before it
	// counts (rule 7 of lockcore's doc).
	kindReplace = "node-replaced"
)

// replaced is the node that kindReplace replaces: neither behind a proxy
// nor a link, nor the Sentinel's.
const replaced = 0

// clockDriftRate is how fast a clock-drift node's clock runs.
const clockDriftRate = 1.005

// episodeEvery is how many random faults separate two episodes; the short
// profile plays only the first.
const episodeEvery = 30

var randomKinds = []string{kindKill9, kindEmpty, kindStop, kindDelay, kindDropReplies, kindCut,
	kindGwKill, kindGwPause, kindClientPause, kindRestore, kindTailLoss, kindFailover, kindGwAll,
	kindSlowLink, kindRecovering, kindKeepProxy, kindClockDrift, kindClockStep, kindSentinel, kindReplace}

// nemesis injects faults one after another; none lasts longer than a few
// TTLs, at most two nodes are faulty at a time, and after a node lost its
// data nothing touches a node for healGap.
type nemesis struct {
	t       *testing.T
	cl      *cluster
	w       *workload
	rng     *rand.Rand
	ttl     time.Duration
	healGap time.Duration
	gap     time.Duration // the shortest pause between two faults (the longest: three times that)

	mu     sync.Mutex
	faults []Fault
	wiped  map[int]bool
	rounds int // episodes played
}

func (n *nemesis) now() time.Duration { return n.w.rec.Now() }

func (n *nemesis) add(f Fault) {
	n.mu.Lock()
	n.faults = append(n.faults, f)
	n.mu.Unlock()
	n.t.Logf("fault %-27s %-9s %6.2fs → %6.2fs", f.Kind, f.Target, f.Start.Seconds(), f.End.Seconds())
}

// Faults returns the faults injected so far.
func (n *nemesis) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Fault(nil), n.faults...)
}

func (n *nemesis) nodeName(i int) string { return fmt.Sprintf("node %d", i) }

// proxyNode is the node behind proxy p.
func (n *nemesis) proxyNode(p int) int { return n.cl.proxied[p] }

// inject runs one fault of kind to its end.
func (n *nemesis) inject(ctx context.Context, kind string) {
	switch kind {
	case kindKill9:
		i := n.rng.IntN(len(n.cl.nodes))
		f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}}
		n.cl.nodes[i].Kill()
		sleepCtx(ctx, n.ttl)
		n.cl.nodes[i].Restart()
		f.End = n.now()
		n.add(f)
	case kindEmpty:
		i := n.pickToWipe()
		f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
		n.cl.nodes[i].RestartEmpty()
		f.End = n.now()
		n.mu.Lock()
		n.wiped[i] = true
		n.mu.Unlock()
		n.add(f)
		sleepCtx(ctx, n.healGap)
	case kindStop:
		i := n.rng.IntN(len(n.cl.nodes))
		f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}}
		n.cl.nodes[i].Pause()
		sleepCtx(ctx, 2*n.ttl)
		n.cl.nodes[i].Resume()
		f.End = n.now()
		n.add(f)
	case kindDelay, kindDropReplies, kindCut:
		p := n.rng.IntN(len(n.cl.proxies))
		px := n.cl.proxies[p]
		f := Fault{Kind: kind, Target: n.nodeName(n.proxyNode(p)), Start: n.now(), Nodes: []int{n.proxyNode(p)}}
		switch kind {
		case kindDelay:
			px.SetDelay(80 * time.Millisecond) // above the gateways' 50ms node timeout
			sleepCtx(ctx, n.ttl*3/2)
		case kindDropReplies:
			px.SetDropReplies(true)
			sleepCtx(ctx, n.ttl*3/2)
		case kindCut:
			for end := time.Now().Add(n.ttl * 3 / 2); time.Now().Before(end); {
				px.Cut()
				sleepCtx(ctx, 100*time.Millisecond)
			}
		}
		px.Heal()
		f.End = n.now()
		n.add(f)
	case kindGwKill:
		g := n.rng.IntN(len(n.cl.gws))
		f := Fault{Kind: kind, Target: fmt.Sprintf("gateway %d", g), Start: n.now(), Gateways: []int{g}}
		n.cl.gws[g].kill()
		sleepCtx(ctx, n.ttl*3/2)
		n.cl.gws[g].restart()
		f.End = n.now()
		n.add(f)
	case kindRestore:
		i := n.pickToWipe()
		n.olderCopy(ctx, kind, i, func() {})
	case kindFailover:
		p := n.rng.IntN(len(n.cl.proxies))
		n.olderCopy(ctx, kind, n.proxyNode(p), func() { n.cl.proxies[p].Cut() })
	case kindTailLoss:
		i := n.pickToWipe()
		f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
		sizes, err := aofSizes(n.cl.nodes[i].Dir())
		if err != nil {
			n.t.Errorf("tail-loss: %v", err)
			return
		}
		sleepCtx(ctx, n.ttl)
		n.cl.nodes[i].Kill()
		for name, size := range sizes {
			if err := os.Truncate(name, size); err != nil {
				n.t.Errorf("tail-loss: %v", err)
			}
		}
		n.cl.nodes[i].Restart()
		n.lost(f, i)
		sleepCtx(ctx, n.healGap)
	case kindClockDrift:
		i := n.rng.IntN(len(n.cl.nodes))
		f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}}
		n.cl.nodes[i].SetClock(0, clockDriftRate)
		sleepCtx(ctx, 2*n.ttl)
		n.cl.nodes[i].SetClock(0, 1)
		f.End = n.now()
		n.add(f)
	case kindClockStep:
		i := n.rng.IntN(len(n.cl.nodes))
		f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, Outside: true}
		n.cl.nodes[i].SetClock(clockStep, 1)
		sleepCtx(ctx, n.ttl) // the load's copies from before the step (TTL 1s) are gone by then
		// Back to the true time, as a later NTP correction would bring it:
		// the copies taken since live clockStep longer on this node alone.
		n.cl.nodes[i].SetClock(-clockStep, 1)
		f.End = n.now()
		n.add(f)
	case kindSentinel:
		n.sentinelFailover(ctx)
	case kindReplace:
		n.replaceNode(ctx)
	case kindSlowLink:
		n.slowRecoveryLink(ctx)
	case kindRecovering:
		n.restartDuringRecovery(ctx)
	case kindKeepProxy:
		p := n.rng.IntN(len(n.cl.proxies))
		n.cl.proxies[p].SetKeepClients(true)
		n.olderCopy(ctx, kind, n.proxyNode(p), func() {})
		n.cl.proxies[p].SetKeepClients(false)
	case kindGwAll:
		f := Fault{Kind: kind, Target: "every gateway", Start: n.now()}
		for g := range n.cl.gws {
			f.Gateways = append(f.Gateways, g)
			n.cl.gws[g].kill()
		}
		sleepCtx(ctx, n.ttl/2)
		for g := range n.cl.gws {
			n.cl.gws[g].restart()
		}
		f.End = n.now()
		n.add(f)
	case kindGwPause:
		g := n.rng.IntN(len(n.cl.gws))
		f := Fault{Kind: kind, Target: fmt.Sprintf("gateway %d", g), Start: n.now(), Gateways: []int{g}}
		n.cl.gws[g].pause()
		sleepCtx(ctx, 2*n.ttl)
		n.cl.gws[g].resume()
		f.End = n.now()
		n.add(f)
	case kindClientPause:
		c := n.rng.IntN(len(n.w.pauseReq))
		n.w.pauseReq[c].Store(true)
		select {
		case f := <-n.w.pauseDone:
			n.add(f)
		case <-time.After(4*n.ttl + 2*time.Second):
			n.w.pauseReq[c].Store(false)
			n.t.Logf("client %d took no grant to stall on", c)
		}
	}
}

// waitState polls gateway g's metrics until node i's state is one of
// states, for at most d, and reports whether it was.
func (n *nemesis) waitState(ctx context.Context, g, i int, d time.Duration, states ...string) bool {
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if slices.Contains(states, n.cl.gws[g].nodeState(n.cl.addrs[g][i])) {
			return true
		}
	}
	return false
}

// slowRecoveryLink plays kindSlowLink: a gateway g's link to node 2 slowed
// while another node i loses its data twice, the second time after another
// gateway put it back in service.
func (n *nemesis) slowRecoveryLink(ctx context.Context) {
	g, other := n.rng.IntN(len(n.cl.gws)), 0
	for other == g {
		other++
	}
	i := n.pickToWipe(n.cl.linked)
	link := n.cl.links[g]
	f := Fault{Kind: kindSlowLink, Target: fmt.Sprintf("%s, gw %d", n.nodeName(i), g), Start: n.now(),
		Nodes: []int{i, n.cl.linked}, DataLoss: true}
	link.SetRate(20 << 10)
	n.cl.nodes[i].RestartEmpty()
	if !n.waitState(ctx, other, i, 3*time.Second, "lost", "quarantined") ||
		!n.waitState(ctx, other, i, 8*time.Second, "serving") {
		n.t.Logf("%s: gateway %d did not report node %d quarantined, then serving", kindSlowLink, other, i)
	}
	sizes, err := aofSizes(n.cl.nodes[i].Dir())
	if err != nil {
		n.t.Errorf("%s: %v", kindSlowLink, err)
		link.Heal()
		return
	}
	sleepCtx(ctx, n.ttl/2)
	n.cl.nodes[i].Kill()
	for name, size := range sizes {
		if err := os.Truncate(name, size); err != nil {
			n.t.Errorf("%s: %v", kindSlowLink, err)
		}
	}
	n.cl.nodes[i].Restart()
	sleepCtx(ctx, n.ttl/2)
	link.Heal()
	n.lost(f, i)
	sleepCtx(ctx, n.healGap)
}

// sentinelFailover plays kindSentinel.
func (n *nemesis) sentinelFailover(ctx context.Context) {
	i := n.cl.sentineled
	old, promoted := n.cl.nodes[i], n.cl.standby
	// The Sentinel learns of a replica from its primary's INFO (every 10 s
	// outside a failover): the replica must be known and in sync first.
	if !poll(ctx, 15*time.Second, func() bool {
		replicas, err := n.cl.sentinel.Do("SENTINEL", "REPLICAS", sentinelName)
		return err == nil && strings.Contains(replicas, strconv.Itoa(portOf(promoted.Addr()))) &&
			promoted.Info("master_link_status") == "up"
	}) {
		n.t.Logf("%s: the Sentinel does not know node %d's replica in sync; not played", kindSentinel, i)
		return
	}
	f := Fault{Kind: kindSentinel, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
	old.Kill()
	if _, err := n.cl.sentinel.Do("SENTINEL", "FAILOVER", sentinelName); err != nil {
		n.t.Errorf("%s: SENTINEL FAILOVER: %v", kindSentinel, err)
	}
	if !poll(ctx, 10*time.Second, func() bool { return promoted.Info("role") == "master" }) {
		n.t.Errorf("%s: the replica of node %d was not promoted within 10 s", kindSentinel, i)
	}
	n.cl.mu.Lock()
	n.cl.nodes[i], n.cl.standby = promoted, old
	n.cl.mu.Unlock()
	old.Restart()
	if _, err := old.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(portOf(promoted.Addr()))); err != nil {
		n.t.Errorf("%s: %v", kindSentinel, err)
	}
	n.lost(f, i)
	sleepCtx(ctx, n.healGap)
}

// replaceNode plays kindReplace.
func (n *nemesis) replaceNode(ctx context.Context) {
	i := replaced
	old := n.cl.nodes[i]
	f := Fault{Kind: kindReplace, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
	for g := range n.cl.gws {
		f.Gateways = append(f.Gateways, g) // each is restarted once or twice
	}
	oldURL := old.URL()
	old.Kill()
	for _, g := range n.cl.gws {
		g.setNodes(slices.DeleteFunc(g.nodeURLs(), func(u string) bool { return u == oldURL }))
		g.restart()
	}
	fresh := redistest.Start(n.t, &redistest.Options{AOF: true, Clock: true,
		Args: []string{"--latency-monitor-threshold", "25", "--appendfsync", "everysec"}})
	for k, g := range n.cl.gws {
		g.setNodes(slices.Insert(g.nodeURLs(), i, fresh.URL()))
		n.cl.addrs[k][i] = fresh.Addr()
		g.restart()
	}
	n.cl.mu.Lock()
	n.cl.nodes[i] = fresh
	n.cl.mu.Unlock()
	n.lost(f, i)
	sleepCtx(ctx, n.healGap)
}

// poll calls cond every 20 ms until it holds, for at most d, and reports
// whether it held.
func poll(ctx context.Context, d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// restartDuringRecovery plays kindRecovering.
func (n *nemesis) restartDuringRecovery(ctx context.Context) {
	i := n.pickToWipe()
	f := Fault{Kind: kindRecovering, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
	n.cl.nodes[i].RestartEmpty()
	seen := false
	for end := time.Now().Add(3 * time.Second); !seen && time.Now().Before(end) && ctx.Err() == nil; time.Sleep(5 * time.Millisecond) {
		for g := range n.cl.gws {
			if st := n.cl.gws[g].nodeState(n.cl.addrs[g][i]); st == "lost" || st == "quarantined" {
				seen = true
				break
			}
		}
	}
	if !seen {
		n.t.Logf("%s: no gateway reported node %d lost or quarantined within 3s", kindRecovering, i)
	}
	n.cl.nodes[i].Kill()
	n.cl.nodes[i].Restart()
	n.lost(f, i)
	sleepCtx(ctx, n.healGap)
}

// olderCopy copies node i's data, lets the load run a TTL or two, then
// restarts the node from the copy (before calls switch, when given: cut
// its proxy's connections).
func (n *nemesis) olderCopy(ctx context.Context, kind string, i int, switchover func()) {
	f := Fault{Kind: kind, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
	src := filepath.Join(n.cl.nodes[i].Dir(), "appendonlydir")
	copyDir := filepath.Join(n.t.TempDir(), "aof")
	if err := os.CopyFS(copyDir, os.DirFS(src)); err != nil {
		n.t.Errorf("%s: %v", kind, err)
		return
	}
	sleepCtx(ctx, time.Duration(1+n.rng.IntN(2))*n.ttl)
	n.cl.nodes[i].Kill()
	if err := os.RemoveAll(src); err != nil {
		n.t.Errorf("%s: %v", kind, err)
	}
	if err := os.CopyFS(src, os.DirFS(copyDir)); err != nil {
		n.t.Errorf("%s: %v", kind, err)
	}
	switchover()
	n.cl.nodes[i].Restart()
	n.lost(f, i)
	sleepCtx(ctx, n.healGap)
}

// lost records f, a fault that ended with node i's data lost.
func (n *nemesis) lost(f Fault, i int) {
	f.End = n.now()
	n.mu.Lock()
	n.wiped[i] = true
	n.mu.Unlock()
	n.add(f)
}

// aofSizes returns the size of each append-only file under dir.
func aofSizes(dir string) (map[string]int64, error) {
	aof := filepath.Join(dir, "appendonlydir")
	entries, err := os.ReadDir(aof)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		out[filepath.Join(aof, e.Name())] = fi.Size()
	}
	return out, nil
}

// pickToWipe prefers a node that has not lost its data yet, so that over a
// run more nodes lose data than a majority. It never picks a node of not.
func (n *nemesis) pickToWipe(not ...int) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var fresh, all []int
	for i := range n.cl.nodes {
		if slices.Contains(not, i) {
			continue
		}
		all = append(all, i)
		if !n.wiped[i] {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) > 0 {
		return fresh[n.rng.IntN(len(fresh))]
	}
	return all[n.rng.IntN(len(all))]
}

// cycle acquires res through some replica as the episode's client (-1),
// writes with the token and releases. It tries each replica once.
func (n *nemesis) cycle(ctx context.Context, res string, k int) {
	rng := rand.New(rand.NewPCG(uint64(k), 7))
	for try := range len(n.cl.gws) {
		gw := (k + try) % len(n.cl.gws)
		lease := n.w.newLease(-1, rng)
		a := n.w.call(ctx, -1, gw, OpAcquire, res, lease, fmt.Sprintf(`{"ttl_ms":%d,"wait_ms":200}`, n.ttl.Milliseconds()))
		if a.Outcome != Ok {
			continue
		}
		n.w.write(ctx, -1, res, lease, a.Token)
		n.w.call(ctx, -1, gw, OpRelease, res, lease, "")
		return
	}
}

// episodeLagThenEmpty is the deterministic data-loss scenario. Nodes 3 and
// 4 are paused while the episode's resources are acquired a few times, so
// their counters fall behind; they come back. Node 0, then node 1, restart
// empty, each followed by the healing gap. Then node 2, the last node
// that never lost data nor fell behind, is paused and the resources are
// acquired again: the granting majority is nodes 0, 1, 3 and 4. At no
// moment are more than two nodes faulty, but over the episode two nodes
// lost their data and two fell behind.
//
// Each episode uses resources of its own that nothing else touches.
func (n *nemesis) episodeLagThenEmpty(ctx context.Context) {
	n.rounds++
	var episode []string
	for k := range 4 {
		episode = append(episode, fmt.Sprintf("episode-%d-%d", n.rounds, k))
	}
	f := Fault{Kind: kindLag, Target: "nodes 3,4", Start: n.now(), Nodes: []int{3, 4}}
	n.cl.nodes[3].Pause()
	n.cl.nodes[4].Pause()
	for k := range 4 {
		for _, res := range episode {
			n.cycle(ctx, res, k)
		}
	}
	n.cl.nodes[3].Resume()
	n.cl.nodes[4].Resume()
	f.End = n.now()
	n.add(f)
	sleepCtx(ctx, n.ttl)
	for _, i := range []int{0, 1} {
		if ctx.Err() != nil {
			return // the run is over: no healing gap is left to wait, so no more losses
		}
		f := Fault{Kind: kindEmpty, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
		n.cl.nodes[i].RestartEmpty()
		f.End = n.now()
		n.mu.Lock()
		n.wiped[i] = true
		n.mu.Unlock()
		n.add(f)
		sleepCtx(ctx, n.healGap)
	}
	f = Fault{Kind: kindLastCurrent, Target: "node 2", Start: n.now(), Nodes: []int{2}}
	n.cl.nodes[2].Pause()
	for _, res := range episode {
		n.cycle(ctx, res, 9)
	}
	sleepCtx(ctx, n.ttl/2)
	n.cl.nodes[2].Resume()
	f.End = n.now()
	n.add(f)
	sleepCtx(ctx, n.ttl)
}

// episodeLiveHolder is the second deterministic data-loss scenario. A
// holder takes a fresh resource and keeps extending it, writing with its
// token after every extension. Nodes 2, 3 and 4 restart empty one after
// another, each followed by the healing gap; at no moment is more than one
// node faulty, but in the end the holder's lock is left only on nodes 0 and
// 1. Right after the last restart a contender tries the resource a few
// times, and once more after the gap. Without the protection the three
// wiped nodes grant it at once, with the holder's own token.
func (n *nemesis) episodeLiveHolder(ctx context.Context) {
	res := fmt.Sprintf("live-holder-%d", n.rounds)
	rng := rand.New(rand.NewPCG(uint64(n.rounds), 11))
	ep := Fault{Kind: kindLiveHolder, Target: res, Start: n.now(), DataLoss: true}
	body := fmt.Sprintf(`{"ttl_ms":%d}`, n.ttl.Milliseconds())
	lease := n.w.newLease(-1, rng)
	// The holder's grant may meet a moment with no quorum on a loaded
	// machine (a node stalled past the node timeout): try a few times, or
	// the episode ends without the fault it is there to show.
	var a Event
	for try := 0; try < 5; try++ {
		if a = n.w.call(ctx, -1, 0, OpAcquire, res, lease, fmt.Sprintf(`{"ttl_ms":%d,"wait_ms":500}`, n.ttl.Milliseconds())); a.Outcome == Ok || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if a.Outcome != Ok {
		n.t.Logf("live-holder episode: the holder got no grant (status %d)", a.Status)
		return
	}
	n.w.write(ctx, -1, res, lease, a.Token)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(n.ttl / 4):
			}
			if x := n.w.call(ctx, -1, k%len(n.cl.gws), OpExtend, res, lease, body); x.Outcome == Ok {
				n.w.write(ctx, -1, res, lease, x.Token)
			}
		}
	}()
	contend := func(tries int) {
		for k := range tries {
			l2 := n.w.newLease(-1, rng)
			c := n.w.call(ctx, -1, (k+1)%len(n.cl.gws), OpAcquire, res, l2, body)
			if c.Outcome == Ok {
				n.w.write(ctx, -1, res, l2, c.Token)
				n.w.call(ctx, -1, (k+1)%len(n.cl.gws), OpRelease, res, l2, "")
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, i := range []int{2, 3, 4} {
		if ctx.Err() != nil {
			break // the run is over: no healing gap is left to wait, so no more losses
		}
		f := Fault{Kind: kindEmpty, Target: n.nodeName(i), Start: n.now(), Nodes: []int{i}, DataLoss: true}
		n.cl.nodes[i].RestartEmpty()
		f.End = n.now()
		n.mu.Lock()
		n.wiped[i] = true
		n.mu.Unlock()
		n.add(f)
		if i == 4 {
			contend(8)
		}
		sleepCtx(ctx, n.healGap)
	}
	close(stop)
	<-done
	contend(3)
	n.w.call(ctx, -1, 0, OpRelease, res, lease, "")
	ep.End = n.now()
	n.add(ep)
}

// run plays the two episodes and then every random kind once in a seeded
// order, all under must (these are what a profile promises, so only the
// load's own end stops them); then random kinds until ctx ends or
// maxFaults were injected. Every episodeEvery faults it plays the episodes
// again.
func (n *nemesis) run(must, ctx context.Context, episodeOnly bool, maxFaults int) {
	n.episodeLagThenEmpty(must)
	n.episodeLiveHolder(must)
	if episodeOnly {
		return
	}
	order := append([]string(nil), randomKinds...)
	n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i := 0; i < maxFaults; i++ {
		c, kind := ctx, randomKinds[n.rng.IntN(len(randomKinds))]
		if i < len(order) {
			c, kind = must, order[i]
		}
		if c.Err() != nil {
			return
		}
		if i > 0 && i%episodeEvery == 0 {
			n.episodeLagThenEmpty(c)
			n.episodeLiveHolder(c)
		}
		n.inject(c, kind)
		sleepCtx(c, n.gap+time.Duration(n.rng.Int64N(2*int64(n.gap)+1)))
	}
}
