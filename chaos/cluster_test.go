package chaos

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/freeport"
	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/internal/proc"
	"github.com/lockgate/lockgate/internal/redistest"
)

// UnsafeEnv is the test-only switch that turns the gateway's data-loss
// protection off, in a gateway built with the lockgate_unprotected tag
// (gatewaytest.BinaryTagged); a production build ignores it.
const UnsafeEnv = "LOCKGATE_UNSAFE_NO_LOSS_PROTECTION"

func TestMain(m *testing.M) {
	code := m.Run()
	gatewaytest.RemoveBinaries()
	os.Exit(code)
}

// gateway is one lockgate process on a fixed loopback address, so that a
// killed replica comes back where clients expect it.
type gateway struct {
	t    testing.TB
	bin  string
	addr string
	args []string
	env  []string
	log  *logTail
	proc proc.Process
}

func (g *gateway) base() string { return "http://" + g.addr }

// launch starts the process and waits until /readyz answers 200.
func (g *gateway) launch() error {
	cmd := exec.Command(g.bin, append([]string{"-addr", g.addr}, g.args...)...)
	cmd.Stdout, cmd.Stderr = g.log, g.log
	cmd.Env = g.env
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	ready := func() error {
		resp, err := hc.Get(g.base() + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}
	if err := g.proc.Launch(cmd, ready, 20*time.Millisecond, 10*time.Second); err != nil {
		return fmt.Errorf("lockgate on %s: %w", g.addr, err)
	}
	return nil
}

func (g *gateway) kill() { g.proc.Kill() }

func (g *gateway) restart() {
	g.kill()
	var err error
	for range 50 {
		if err = g.launch(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.t.Errorf("gateway %s did not restart: %v\n%s", g.addr, err, tail(g.log.String(), 20))
}

// nodeState is the state gateway g's metrics give the node it reaches at
// addr (lockgate_node_state), or "" when it does not answer in time.
func (g *gateway) nodeState(addr string) string {
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	resp, err := hc.Get(g.base() + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "lockgate_node_state{") || !strings.HasSuffix(l, "} 1") ||
			!strings.Contains(l, `node="`+addr+`"`) {
			continue
		}
		if _, rest, ok := strings.Cut(l, `state="`); ok {
			state, _, _ := strings.Cut(rest, `"`)
			return state
		}
	}
	return ""
}

// pause and resume do nothing to a gateway that is not running (a nemesis
// may pick one that another fault killed).
func (g *gateway) pause()  { _ = g.proc.Pause() }
func (g *gateway) resume() { _ = g.proc.Resume() }

// logTail keeps about the last max bytes written to it, so a long run's
// gateway logs stay bounded.
type logTail struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 2*l.max {
		l.b = append([]byte(nil), l.b[len(l.b)-l.max:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sentinelName is the name Redis Sentinel knows node sentineled's primary
// by.
const sentinelName = "node-1"

// cluster is the topology under test.
type cluster struct {
	// mu guards nodes against a reader on another goroutine than the
	// nemesis's (nodesNow): a Sentinel failover swaps nodes[sentineled]
	// and standby.
	mu    sync.Mutex
	nodes []*redistest.Server
	// nodes[sentineled] is a primary that Redis Sentinel manages, with
	// standby its replica: the gateways reach that node through the
	// Sentinel, which the nemesis asks to fail over (kindSentinel). Its
	// automatic failover is off (down-after-milliseconds of a minute), so
	// that other faults of the node stay what they are.
	sentineled int
	standby    *redistest.Server
	sentinel   *redistest.Server
	// proxies[i] stands in front of nodes[proxied[i]] for every gateway.
	proxies []*faultproxy.Proxy
	proxied []int
	// links[g] stands in front of nodes[linked] for gateway g alone: one
	// gateway's own link to a node, which a fault can slow for it alone.
	links  []*faultproxy.Proxy
	linked int
	gws    []*gateway
	// addrs[g][i] is the address gateway g reaches node i at: the label
	// of node i in g's metrics.
	addrs [][]string
	// clientToken is the bearer token of the clients (every lock and
	// semaphore operation but force); operatorToken the one of the
	// operator, allowed only force releases (access control must be on
	// for the gateway to take one: see handlers/admin.go).
	clientToken, operatorToken string
}

// writeAuthFile writes the gateways' token file (docs/operations.md,
// Access control) into dir and returns its path.
func (c *cluster) writeAuthFile(t *testing.T, dir string) string {
	t.Helper()
	c.clientToken = fmt.Sprintf("chaos-clients-%016x", rand.Uint64())
	c.operatorToken = fmt.Sprintf("chaos-operator-%016x", rand.Uint64())
	path := filepath.Join(dir, "tokens")
	body := fmt.Sprintf("%s PUT,PATCH,DELETE,GET * clients\n%s force * operator\n", c.clientToken, c.operatorToken)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startCluster starts 5 redis-server nodes with AOF (everysec), a fault proxy in front
// of the last two, and 3 gateways with access control on (writeAuthFile),
// each reaching node 2 through a link proxy of its own; unsafe sets the
// switch that turns the data-loss protection off.
func startCluster(t *testing.T, unsafe bool) *cluster {
	t.Helper()
	redis.SetLogger(quietRedis{}) // the stall log's failed dials to a node the nemesis stopped
	bin := gatewaytest.Binary(t, "lockgate")
	if unsafe {
		bin = gatewaytest.BinaryTagged(t, "lockgate", "lockgate_unprotected")
	}
	// Redis records every event slower than 25 ms (collected by stallLog):
	// an fsync that holds a node up shows there. The nodes sync their AOF
	// once a second, as docs/operations.md now recommends: a restarted
	// node recovers from the others, whatever it lost.
	c := &cluster{nodes: redistest.StartN(t, 5, &redistest.Options{AOF: true, Clock: true,
		Args: []string{"--latency-monitor-threshold", "25", "--appendfsync", "everysec"}}), proxied: []int{3, 4},
		linked: 2}
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.URL()
	}
	c.startSentinel(t, 1)
	urls[c.sentineled] = "redis-sentinel://" + c.sentinel.Addr() + "/" + sentinelName
	for _, i := range c.proxied {
		p, err := faultproxy.Start(c.nodes[i].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.proxies = append(c.proxies, p)
		urls[i] = "redis://" + p.Addr()
	}
	authFile := c.writeAuthFile(t, t.TempDir())
	env := []string{"PATH=" + os.Getenv("PATH")}
	if unsafe {
		env = append(env, UnsafeEnv+"=1")
	}
	for range 3 {
		link, err := faultproxy.Start(c.nodes[c.linked].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { link.Close() })
		c.links = append(c.links, link)
		own := slices.Clone(urls)
		own[c.linked] = "redis://" + link.Addr()
		addrs := make([]string, len(own))
		for i, u := range own {
			addrs[i] = strings.TrimPrefix(u, "redis://")
		}
		addrs[c.sentineled] = "sentinel:" + sentinelName + "@" + c.sentinel.Addr() // lockcore/redisnode's name
		c.addrs = append(c.addrs, addrs)
		g := &gateway{t: t, bin: bin, addr: freeport.Addr(t), env: env, log: &logTail{max: 64 << 10},
			args: []string{"-redis", strings.Join(own, ","), "-min-ttl", "100ms", "-default-ttl", "1s",
				"-max-ttl", "2s", "-max-wait", "5s", "-log-level", "warn", "-auth-file", authFile}}
		if err := g.launch(); err != nil {
			t.Fatalf("gateway: %v\n%s", err, g.log.String())
		}
		t.Cleanup(func() {
			g.kill()
			if t.Failed() {
				t.Logf("gateway %s log (last lines):\n%s", g.addr, tail(g.log.String(), 8))
			}
		})
		c.gws = append(c.gws, g)
	}
	return c
}

// setNodes gives gateway g the node list urls from its next start on.
func (g *gateway) setNodes(urls []string) {
	i := slices.Index(g.args, "-redis")
	g.args[i+1] = strings.Join(urls, ",")
}

// nodeURLs is gateway g's node list now.
func (g *gateway) nodeURLs() []string {
	return strings.Split(g.args[slices.Index(g.args, "-redis")+1], ",")
}

// startSentinel makes node i a primary that a Sentinel manages, with a
// replica (the standby) of its own, and waits until the Sentinel knows
// the replica (a forced failover needs one).
func (c *cluster) startSentinel(t *testing.T, i int) {
	t.Helper()
	c.sentineled = i
	c.standby = redistest.Start(t, &redistest.Options{AOF: true, Clock: true,
		Args: []string{"--latency-monitor-threshold", "25", "--appendfsync", "everysec"}})
	if _, err := c.standby.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(portOf(c.nodes[i].Addr()))); err != nil {
		t.Fatal(err)
	}
	c.sentinel = redistest.StartSentinel(t, c.nodes[i], sentinelName)
	if _, err := c.sentinel.Do("SENTINEL", "SET", sentinelName, "down-after-milliseconds", "60000"); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		replicas, err := c.sentinel.Do("SENTINEL", "REPLICAS", sentinelName)
		if err == nil && strings.Contains(replicas, strconv.Itoa(portOf(c.standby.Addr()))) &&
			c.standby.Info("master_link_status") == "up" {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the Sentinel does not know node %d's replica after 15 s: %q, %v", i, replicas, err)
		}
	}
}

// portOf is the port of a host:port address.
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// nodesNow returns the nodes as they are now, for a goroutine other than
// the nemesis's.
func (c *cluster) nodesNow() []*redistest.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// healAll ends every fault still in place.
func (c *cluster) healAll() {
	for _, p := range slices.Concat(c.proxies, c.links) {
		p.Heal()
		p.SetKeepClients(false)
	}
	for _, n := range append(slices.Clone(c.nodes), c.standby) {
		if !n.Running() {
			n.Restart()
		} else {
			n.Resume() // SIGCONT to a running server is harmless
		}
	}
	for _, g := range c.gws {
		running := g.proc.Running()
		if !running {
			g.restart()
		} else {
			g.resume()
		}
	}
}

// memory reads DBSIZE and INFO memory from every node.
func (c *cluster) memory(t *testing.T) []NodeMemory {
	t.Helper()
	out := make([]NodeMemory, len(c.nodes))
	for i, n := range c.nodes {
		conn, err := net.DialTimeout("tcp", n.Addr(), time.Second)
		if err != nil {
			t.Errorf("node %d: %v", i, err)
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		r := bufio.NewReader(conn)
		if _, err := conn.Write([]byte("DBSIZE\r\nINFO memory\r\n")); err != nil {
			t.Errorf("node %d: %v", i, err)
			conn.Close()
			continue
		}
		line, _ := r.ReadString('\n')
		out[i].Keys, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, ":")), 10, 64)
		head, _ := r.ReadString('\n') // $<len>
		size, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
		body := make([]byte, size+2)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Errorf("node %d INFO: %v", i, err)
		}
		for _, l := range strings.Split(string(body), "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				out[i].UsedMemory, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		conn.Close()
	}
	return out
}

// stallLog collects the events the nodes record as slower than 25 ms
// (LATENCY LATEST for the kinds, LATENCY HISTORY for their samples). A
// node forgets its history when it restarts, so the run samples every node
// every second (sample), and once more at the end; a sample is kept once.
type stallLog struct {
	c       *cluster
	started time.Time // when the run's clock began
	mu      sync.Mutex
	seen    map[Stall]bool
	all     []Stall
}

func newStallLog(c *cluster, started time.Time) *stallLog {
	return &stallLog{c: c, started: started, seen: map[Stall]bool{}}
}

// sample reads every node's recorded stalls and keeps the new ones. A node
// that does not answer within 300 ms (stopped, cut off) is skipped.
func (l *stallLog) sample() {
	for i, n := range l.c.nodesNow() {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), DisableIdentity: true, MaxRetries: -1,
			DialTimeout: 300 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		rows, _ := rdb.Do(ctx, "LATENCY", "LATEST").Slice()
		for _, row := range rows {
			r, ok := row.([]any)
			if !ok || len(r) < 1 {
				continue
			}
			event, _ := r[0].(string)
			samples, _ := rdb.Do(ctx, "LATENCY", "HISTORY", event).Slice()
			for _, sample := range samples {
				if v, ok := sample.([]any); ok && len(v) == 2 {
					at, _ := v[0].(int64)
					ms, _ := v[1].(int64)
					l.add(Stall{Node: i, Event: event, At: time.Unix(at, 0).Sub(l.started), Took: time.Duration(ms) * time.Millisecond})
				}
			}
		}
		cancel()
		_ = rdb.Close()
	}
}

func (l *stallLog) add(st Stall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.seen[st] {
		l.seen[st] = true
		l.all = append(l.all, st)
	}
}

// run samples every second until ctx ends.
func (l *stallLog) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.sample()
		}
	}
}

// stalls samples once more and returns every stall kept, in time order.
func (l *stallLog) stalls() []Stall {
	l.sample()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.all)
	slices.SortStableFunc(out, func(a, b Stall) int { return cmp.Compare(a.At, b.At) })
	return out
}
