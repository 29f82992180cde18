package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
	"github.com/lockgate/lockgate/lockcore/watch"
)

// TestContractOverRedisNodes runs one table of HTTP scenarios, covering
// every lock and semaphore operation of openapi.yaml, over real Redis
// nodes: three single redis-server processes, then three Redis Clusters of
// three shards each. Every answer is checked against the contract
// (checkContract), and the table checks what the memnode tests check, so
// that a node kind that answers differently (a listing that misses a
// shard, a release announced where no one hears it) fails here.
//
// Two gateway replicas share the nodes, each with its own clients, as two
// lockgate processes do: a waiter, a long poll and an event stream on
// replica a are answered by a release through replica b, which a can only
// hear of through the nodes' release announcements (its watch hub never
// polls).
func TestContractOverRedisNodes(t *testing.T) {
	t.Parallel()
	t.Run("single", func(t *testing.T) {
		servers := redistest.StartN(t, 3, nil)
		contractOverRedis(t, func(t *testing.T, spy *refusals) []lockcore.Node {
			return initNodes(t, len(servers), func(i int) (lockcore.Node, error) {
				n, err := redisnode.New(servers[i].URL())
				if err != nil || spy == nil {
					return n, err
				}
				return &spiedRedisNode{Node: n, spy: spy}, nil
			})
		}, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		clusters := []*redistest.Cluster{redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0), redistest.StartCluster(t, 3, 0)}
		contractOverRedis(t, func(t *testing.T, spy *refusals) []lockcore.Node {
			return initNodes(t, len(clusters), func(i int) (lockcore.Node, error) {
				n, err := redisnode.NewCluster(clusters[i].URL())
				if err != nil || spy == nil {
					return n, err
				}
				return &spiedClusterNode{ClusterNode: n, spy: spy}, nil
			})
		}, func(t *testing.T, names []string) {
			// The listing must walk every shard: the names it is given
			// fall on every primary of every Cluster.
			t.Helper()
			for i, c := range clusters {
				on := map[string]bool{}
				for _, name := range names {
					on[c.OwnerOf(lockcore.FenceSlot(name)).Addr()] = true
				}
				if len(on) != len(c.Primaries()) {
					t.Fatalf("node %d: %d names fall on %d of its %d shards", i, len(names), len(on), len(c.Primaries()))
				}
			}
		})
	})
}

// initNodes makes n nodes with connect, initializes each as a new
// deployment's first gateway does, and closes them when t ends.
func initNodes(t *testing.T, n int, connect func(i int) (lockcore.Node, error)) []lockcore.Node {
	t.Helper()
	nodes := make([]lockcore.Node, n)
	for i := range nodes {
		node, err := connect(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.(io.Closer).Close() })
		if err := nodetest.Initialize(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		nodes[i] = node
	}
	return nodes
}

// Tokens of replica b's token file.
const (
	redisOps    = "redis-ops-token-0123456789abcdef"
	redisOnCall = "redis-on-call-token-0123456789abcdef"
)

// redisReplicas are two gateway replicas over the same three nodes, each
// with its own node clients, Redlock and watch hub.
type redisReplicas struct {
	// a has no access control; its nodes report refusals to spy, and its
	// hub never polls, so it hears only its own changes and the nodes'
	// announcements.
	a   *gateway
	hub *watch.Hub
	srv *httptest.Server // serves a
	spy *refusals
	// b sits behind a token file (redisOps may do anything but force,
	// redisOnCall may read and force), as cmd/lockgate with -auth-file.
	b *gateway
	// spread, if set, fails t unless names fall on every shard of every
	// node.
	spread func(t *testing.T, names []string)
}

// loadedNodeTimeout gives the replicas a node timeout for a loaded
// machine. The scenarios check answers, not speed, and each answer needs
// every node call (a listing's scan steps, one node at a time) to come
// back: under -race with the CPUs busy, calls to live redis-server
// processes took over the default 50 ms, and the scenarios got 503
// no-quorum, or a listing that skipped a node and so repeated names.
// lockcore.Options.NodeTimeout says to raise it on a saturated gateway;
// MinTTL keeps its required room (twice the node timeout). The bound is
// kept fixed (MaxNodeTimeout): a force release waits it out (rule FR4 of
// lockcore/doc.go), and ten times it would make each one take 10 s.
var loadedNodeTimeout = &lockcore.Options{NodeTimeout: time.Second, MaxNodeTimeout: time.Second, MinTTL: 2 * time.Second}

// ops returns the headers of a request by b's redisOps token, then hdr.
func ops(hdr ...string) []string { return append(bearerOf(redisOps), hdr...) }

// contractOverRedis runs the scenarios over two replicas of nodes made by
// connect (new clients to the same three nodes at each call, initialized
// as a new deployment's first gateway initializes them, each reporting
// its refusals to spy when it is not nil).
func contractOverRedis(t *testing.T, connect func(t *testing.T, spy *refusals) []lockcore.Node, spread func(t *testing.T, names []string)) {
	r := &redisReplicas{spy: &refusals{n: map[string]int{}}, spread: spread}
	// A failing scenario's log shows the per-node causes of a 503.
	lg := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	r.a, r.hub = hubGateway(t, connect(t, r.spy), loadedNodeTimeout, &watch.Options{Poll: time.Hour}, &handlers.Options{Logger: &lg})
	r.srv = r.a.serve(t, nil)
	// Before srv.Close, which waits for its handlers: closing the hub ends
	// any long poll or stream still open when a scenario fails.
	t.Cleanup(r.hub.Close)
	p, err := auth.Parse(strings.NewReader(redisOps + " PUT,PATCH,DELETE,GET * ops\n" + redisOnCall + " GET,force * on-call\n"))
	if err != nil {
		t.Fatal(err)
	}
	r.b, _ = hubGateway(t, connect(t, nil), loadedNodeTimeout, nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware},
		AllowForce: true, Grants: p.Grants, Caller: p.Name, Logger: &lg,
	})
	for _, sc := range redisScenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, r) })
	}
}

// refusals counts, per resource, the acquisitions that a replica's nodes
// refused because another lease held the lock: once a waiting PUT's
// resource has one, the waiter has made its first attempt and waits.
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *refusals) saw(req lockcore.NodeAcquire, rep lockcore.NodeReply, err error) {
	if err == nil && rep.Status == lockcore.StatusTaken {
		s.mu.Lock()
		s.n[req.Resource]++
		s.mu.Unlock()
	}
}

func (s *refusals) of(resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[resource]
}

// spiedRedisNode is a Node that reports its refusals; every other method,
// optional interfaces included, is the Node's.
type spiedRedisNode struct {
	*redisnode.Node
	spy *refusals
}

func (n *spiedRedisNode) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	rep, err := n.Node.Acquire(ctx, req)
	n.spy.saw(req, rep, err)
	return rep, err
}

// spiedClusterNode is spiedRedisNode for a ClusterNode.
type spiedClusterNode struct {
	*redisnode.ClusterNode
	spy *refusals
}

func (n *spiedClusterNode) Acquire(ctx context.Context, req lockcore.NodeAcquire) (lockcore.NodeReply, error) {
	rep, err := n.ClusterNode.Acquire(ctx, req)
	n.spy.saw(req, rep, err)
	return rep, err
}

// ifMatch is an If-Match header for token.
func ifMatch(token int64) []string {
	return []string{api.HeaderIfMatch, `"` + strconv.FormatInt(token, 10) + `"`}
}

// redisScenarios run in order over one pair of replicas, each on resources
// of its own.
var redisScenarios = []struct {
	name string
	run  func(t *testing.T, r *redisReplicas)
}{
	{"readyz: 200 on both replicas", func(t *testing.T, r *redisReplicas) {
		for _, g := range []*gateway{r.a, r.b} {
			var h api.Health
			if res := g.do(t, GET, "/readyz", ""); res.Status != http.StatusOK || json.Unmarshal(res.Body, &h) != nil || h.Status != "ready" {
				t.Fatalf("readyz: %s", res)
			}
			// Each node's state, in the 200 as in the 503.
			if len(h.Nodes) != 3 || slices.ContainsFunc(h.Nodes, func(n api.NodeState) bool { return n.State != "serving" || n.Since == nil }) {
				t.Errorf("readyz: nodes %+v, want 3 serving, each with since", h.Nodes)
			}
		}
	}},

	{"acquire: 201 new, 200 again with its Lease-Id, 409 for another lease on either replica", func(t *testing.T, r *redisReplicas) {
		first := wantLease(t, r.a.do(t, PUT, "/locks/acq", `{"ttl_ms":30000,"owner":"w1"}`, api.HeaderLeaseID, leaseA), http.StatusCreated, "acq")
		if first.LeaseID != leaseA || first.TTLms != 30000 {
			t.Errorf("lease %q ttl_ms %d, want the client's %q and 30000", first.LeaseID, first.TTLms, leaseA)
		}
		again := r.a.do(t, PUT, "/locks/acq", `{"ttl_ms":60000}`, api.HeaderLeaseID, leaseA)
		if l := wantLease(t, again, http.StatusOK, "acq"); l.FencingToken != first.FencingToken || l.TTLms != 60000 {
			t.Errorf("re-entry: token %d ttl_ms %d, want token %d and 60000", l.FencingToken, l.TTLms, first.FencingToken)
		}
		if loc := again.Header.Get("Location"); loc != "" {
			t.Errorf("Location %q on 200", loc)
		}
		for _, res := range []response{
			r.a.do(t, PUT, "/locks/acq", "", api.HeaderLeaseID, leaseB),
			r.a.do(t, PUT, "/locks/acq", ""),
			r.b.do(t, PUT, "/locks/acq", "", ops(api.HeaderLeaseID, leaseB)...),
		} {
			p := wantProblem(t, res, http.StatusConflict, api.ProblemTaken)
			if p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 || *p.RetryAfterMs > 60000 {
				t.Errorf("retry_after_ms %v, want in (0, 60000]", p.RetryAfterMs)
			}
			if res.Header.Get(api.HeaderRetryAfter) == "" {
				t.Error("409 without Retry-After")
			}
		}
		if res := r.a.do(t, DELETE, "/locks/acq", "", api.HeaderLeaseID, leaseA); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
		if next := r.b.do(t, PUT, "/locks/acq", "", ops()...); wantLease(t, next, http.StatusCreated, "acq").FencingToken <= first.FencingToken {
			t.Errorf("next holder's token %s, want above %d", next.Header.Get(api.HeaderFencingToken), first.FencingToken)
		}
	}},

	{"extend: 200 with the holder's If-Match, 412 with another, 409 by another lease, 404 once free", func(t *testing.T, r *redisReplicas) {
		l := r.a.acquire(t, "ext", "", `{"ttl_ms":5000}`)
		e := wantLease(t, r.a.do(t, PATCH, "/locks/ext", `{"ttl_ms":60000}`, append([]string{api.HeaderLeaseID, l.LeaseID}, ifMatch(l.FencingToken)...)...), http.StatusOK, "ext")
		if e.FencingToken != l.FencingToken || e.LeaseID != l.LeaseID || e.TTLms != 60000 {
			t.Errorf("extended to token %d lease %q ttl_ms %d, want %d %q 60000", e.FencingToken, e.LeaseID, e.TTLms, l.FencingToken, l.LeaseID)
		}
		// A lease is the nodes', not a replica's.
		wantLease(t, r.b.do(t, PATCH, "/locks/ext", "", ops(api.HeaderLeaseID, l.LeaseID)...), http.StatusOK, "ext")
		wantProblem(t, r.a.do(t, PATCH, "/locks/ext", "", append([]string{api.HeaderLeaseID, l.LeaseID}, ifMatch(l.FencingToken+1)...)...),
			http.StatusPreconditionFailed, api.ProblemTokenMismatch)
		res := r.a.do(t, PATCH, "/locks/ext", `{"ttl_ms":2000}`, api.HeaderLeaseID, leaseB)
		if p := wantProblem(t, res, http.StatusConflict, api.ProblemHeldByOther); p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 {
			t.Errorf("retry_after_ms %v, want above 0", p.RetryAfterMs)
		}
		if res := r.a.do(t, DELETE, "/locks/ext", "", api.HeaderLeaseID, l.LeaseID); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
		wantProblem(t, r.a.do(t, PATCH, "/locks/ext", "", api.HeaderLeaseID, l.LeaseID), http.StatusNotFound, api.ProblemNotHeld)
	}},

	{"release: 409 by another lease, 412 with another If-Match, 204, then 404", func(t *testing.T, r *redisReplicas) {
		l := r.a.acquire(t, "rel", leaseA, "")
		wantProblem(t, r.a.do(t, DELETE, "/locks/rel", "", api.HeaderLeaseID, leaseB), http.StatusConflict, api.ProblemHeldByOther)
		wantProblem(t, r.a.do(t, DELETE, "/locks/rel", "", append([]string{api.HeaderLeaseID, leaseA}, ifMatch(12345)...)...),
			http.StatusPreconditionFailed, api.ProblemTokenMismatch)
		if res := r.a.do(t, GET, "/locks/rel", ""); res.Status != http.StatusOK {
			t.Fatalf("the refused releases broke the lock: %s", res)
		}
		res := r.b.do(t, DELETE, "/locks/rel", "", ops(append([]string{api.HeaderLeaseID, leaseA}, ifMatch(l.FencingToken)...)...)...)
		if res.Status != http.StatusNoContent || len(res.Body) != 0 {
			t.Fatalf("release through the other replica: %s, want 204 without a body", res)
		}
		wantProblem(t, r.a.do(t, DELETE, "/locks/rel", "", api.HeaderLeaseID, leaseA), http.StatusNotFound, api.ProblemNotHeld)
		wantProblem(t, r.a.do(t, GET, "/locks/rel", ""), http.StatusNotFound, api.ProblemNotHeld)
	}},

	{"inspect: 200 with owner and token, never the lease id, on both replicas; 404 once free", func(t *testing.T, r *redisReplicas) {
		l := r.a.acquire(t, "insp", leaseA, `{"ttl_ms":5000,"owner":"worker-7"}`)
		for _, res := range []response{r.a.do(t, GET, "/locks/insp", ""), r.b.do(t, GET, "/locks/insp", "", ops()...)} {
			var info api.LockInfo
			if res.Status != http.StatusOK || json.Unmarshal(res.Body, &info) != nil {
				t.Fatalf("GET: %s", res)
			}
			if info.Resource != "insp" || info.Owner != "worker-7" || info.FencingToken != l.FencingToken || info.TTLms != 5000 {
				t.Errorf("GET: %+v, want insp held by worker-7 with token %d and ttl_ms 5000", info, l.FencingToken)
			}
			if strings.Contains(res.String(), leaseA) {
				t.Errorf("GET shows the lease id: %s", res)
			}
			if got := res.Header.Get(api.HeaderETag); got != ifMatch(l.FencingToken)[1] {
				t.Errorf("ETag %q for token %d", got, l.FencingToken)
			}
		}
		if res := r.a.do(t, http.MethodHead, "/locks/insp", ""); res.Status != http.StatusOK {
			t.Errorf("HEAD: %s", res)
		}
		r.a.do(t, DELETE, "/locks/insp", "", api.HeaderLeaseID, leaseA)
		wantProblem(t, r.a.do(t, GET, "/locks/insp", ""), http.StatusNotFound, api.ProblemNotHeld)
		wantProblem(t, r.b.do(t, GET, "/locks/insp", "", ops()...), http.StatusNotFound, api.ProblemNotHeld)
		if res := r.a.do(t, http.MethodHead, "/locks/insp", ""); res.Status != http.StatusNotFound {
			t.Errorf("HEAD once free: %s", res)
		}
	}},

	{"a waiter on one replica gets the lock when the other releases it", func(t *testing.T, r *redisReplicas) {
		holder := wantLease(t, r.b.do(t, PUT, "/locks/wait", `{"ttl_ms":30000}`, ops()...), http.StatusCreated, "wait")
		waiting := sendAsync(context.Background(), r.srv, PUT, "/locks/wait", `{"wait_ms":60000,"owner":"waiter"}`)
		waitUntil(t, "the waiter's first attempt is refused", func() bool { return r.spy.of("wait") > 0 })
		if res := r.b.do(t, DELETE, "/locks/wait", "", ops(api.HeaderLeaseID, holder.LeaseID)...); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
		// The holder's TTL is 30 s: an answer within 10 s came from the
		// release, which replica a heard of through the nodes only.
		l := wantWaiterGranted(t, waiting, "wait", holder.FencingToken)
		var info api.LockInfo
		if res := r.b.do(t, GET, "/locks/wait", "", ops()...); res.Status != http.StatusOK || json.Unmarshal(res.Body, &info) != nil ||
			info.Owner != "waiter" || info.FencingToken != l.FencingToken {
			t.Errorf("the other replica sees %s, want the waiter with token %d", res, l.FencingToken)
		}
		r.a.do(t, DELETE, "/locks/wait", "", api.HeaderLeaseID, l.LeaseID)
	}},

	{"a waiter gets 409 when wait_ms runs out", func(t *testing.T, r *redisReplicas) {
		r.b.do(t, PUT, "/locks/wait-out", `{"ttl_ms":30000}`, ops()...)
		a := await(t, sendAsync(context.Background(), r.srv, PUT, "/locks/wait-out", `{"wait_ms":150}`), 10*time.Second, "the waiter")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, PUT, "/locks/wait-out", a.res)
		wantProblem(t, a.res, http.StatusConflict, api.ProblemTaken)
		if a.took < 150*time.Millisecond {
			t.Errorf("answered after %v, before wait_ms ran out", a.took)
		}
	}},

	{"listing: 50 names over every shard, paged by prefix and cursor, each once", func(t *testing.T, r *redisReplicas) {
		tokens := map[string]int64{}
		var names []string
		for i := range 50 {
			name := fmt.Sprintf("list.%02d", i)
			names = append(names, name)
			tokens[name] = r.a.acquire(t, name, "", `{"owner":"owner of `+name+`"}`).FencingToken
		}
		r.a.acquire(t, "lister", "", "") // outside the prefix "list."
		if r.spread != nil {
			r.spread(t, names)
		}
		page := func(g *gateway, target string, hdr ...string) api.LockList {
			t.Helper()
			res := g.do(t, GET, target, "", hdr...)
			if res.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q", res.Header.Get("Cache-Control"))
			}
			return res.list(t)
		}
		walk := func(g *gateway, prefix string, limit int, hdr ...string) (got []string, pages int) {
			query := "/locks?prefix=" + prefix + "&limit=" + strconv.Itoa(limit)
			target := query
			for pages = 1; ; pages++ {
				p := page(g, target, hdr...)
				if len(p.Locks) > limit {
					t.Fatalf("page of %d locks, limit %d", len(p.Locks), limit)
				}
				for _, l := range p.Locks {
					if !strings.HasPrefix(l.Resource, prefix) {
						t.Errorf("prefix %q lists %s", prefix, l.Resource)
					}
					got = append(got, l.Resource)
					if want, ok := tokens[l.Resource]; ok && (l.FencingToken != want || l.Owner != "owner of "+l.Resource || l.TTLms != 30000) {
						t.Errorf("listed %+v, want token %d, its owner and ttl_ms 30000", l, want)
					}
				}
				if p.NextCursor == "" {
					break
				}
				if pages > 200 {
					t.Fatal("the listing never ends")
				}
				target = query + "&cursor=" + p.NextCursor
			}
			slices.Sort(got)
			return got, pages
		}
		for _, tc := range []struct {
			g     *gateway
			limit int
			hdr   []string
		}{{r.a, 7, nil}, {r.b, 20, ops()}} {
			got, pages := walk(tc.g, "list.", tc.limit, tc.hdr...)
			if !slices.Equal(got, names) {
				t.Errorf("limit %d: listed %d names %v, want each of the %d list. names once", tc.limit, len(got), got, len(names))
			}
			if pages < len(names)/tc.limit {
				t.Errorf("limit %d: %d pages for %d names", tc.limit, pages, len(names))
			}
		}
		all, _ := walk(r.a, "", 1000)
		for _, name := range append(names, "lister") {
			if !slices.Contains(all, name) {
				t.Errorf("GET /locks does not list %s", name)
			}
		}
		if res := r.a.do(t, http.MethodHead, "/locks?prefix=list.", ""); res.Status != http.StatusOK {
			t.Errorf("HEAD /locks: %s", res)
		}
		wantProblem(t, r.a.do(t, GET, "/locks?prefix=list.&cursor=nonsense", ""), http.StatusBadRequest, api.ProblemInvalid)
	}},

	{"long poll: at once for another token, else answered by a release on the other replica", func(t *testing.T, r *redisReplicas) {
		l := r.a.acquire(t, "poll", "", `{"owner":"w1"}`)
		target := "/locks/poll?after=0&wait_ms=60000"
		a := await(t, sendAsync(context.Background(), r.srv, GET, target, ""), 10*time.Second, "long poll after 0")
		checkContract(t, GET, target, a.res)
		if a.err != nil || a.res.Status != http.StatusOK || a.res.Header.Get(api.HeaderETag) != ifMatch(l.FencingToken)[1] {
			t.Fatalf("long poll after 0: %s, %v", a.res, a.err)
		}
		// Once the hub has read the lock held, only an announcement can
		// tell it of the release (its Poll is an hour); without this, the
		// long poll's first read could come after the release.
		sub, err := r.hub.Subscribe("poll")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		select {
		case ev := <-sub.C:
			if !ev.Held || ev.Token != l.FencingToken {
				t.Fatalf("the hub reads %+v, want poll held with token %d", ev, l.FencingToken)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the hub did not read the lock within 10s")
		}
		watchers := r.hub.Watchers()
		target = "/locks/poll?after=" + strconv.FormatInt(l.FencingToken, 10) + "&wait_ms=60000"
		ch := sendAsync(context.Background(), r.srv, GET, target, "")
		waitUntil(t, "the long poll watches", func() bool { return r.hub.Watchers() == watchers+1 })
		if res := r.b.do(t, DELETE, "/locks/poll", "", ops(api.HeaderLeaseID, l.LeaseID)...); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
		a = await(t, ch, 10*time.Second, "long poll on the holder's token")
		if a.err != nil {
			t.Fatal(a.err)
		}
		checkContract(t, GET, target, a.res)
		wantProblem(t, a.res, http.StatusNotFound, api.ProblemNotHeld)
		// Nothing changes before wait_ms ends: the state then.
		wantProblem(t, r.a.do(t, GET, "/locks/poll?after=0&wait_ms=20", ""), http.StatusNotFound, api.ProblemNotHeld)
	}},

	{"event streams: state first, then a release on the other replica", func(t *testing.T, r *redisReplicas) {
		one := r.a.acquire(t, "sse.1", "", `{"owner":"w1"}`)
		two := wantLease(t, r.b.do(t, PUT, "/locks/sse.2", "", ops()...), http.StatusCreated, "sse.2")
		events, stop := openStream(t, r.srv, r.srv.URL, "/locks/sse.1")
		defer stop()
		ev := nextEvent(t, events)
		wantEvent(t, ev, "state", one.FencingToken)
		if !ev.data.Held || ev.data.Owner != "w1" || ev.data.Resource != "sse.1" {
			t.Fatalf("state %+v, want sse.1 held by w1", ev.data)
		}
		prefixed, stopPrefix := openStream(t, r.srv, r.srv.URL, "/locks?prefix=sse.")
		defer stopPrefix()
		states := map[string]int64{}
		for range 2 {
			ev := nextEvent(t, prefixed)
			if ev.name != "state" {
				t.Fatalf("prefix stream: %s event before the states", ev.name)
			}
			states[ev.data.Resource] = ev.data.FencingToken
		}
		if states["sse.1"] != one.FencingToken || states["sse.2"] != two.FencingToken {
			t.Fatalf("prefix stream states %v, want sse.1 %d and sse.2 %d", states, one.FencingToken, two.FencingToken)
		}
		if res := r.b.do(t, DELETE, "/locks/sse.1", "", ops(api.HeaderLeaseID, one.LeaseID)...); res.Status != http.StatusNoContent {
			t.Fatalf("release: %s", res)
		}
		wantEvent(t, nextEvent(t, events), "released", one.FencingToken)
		ev = nextEvent(t, prefixed)
		wantEvent(t, ev, "released", one.FencingToken)
		if ev.data.Resource != "sse.1" {
			t.Fatalf("prefix stream: released %s, want sse.1", ev.data.Resource)
		}
	}},

	{"force release: 403 without the force grant, 204 by on-call, 404 once free, next token higher", func(t *testing.T, r *redisReplicas) {
		held := r.a.acquire(t, "stuck", "", `{"ttl_ms":3600000}`)
		wantProblem(t, r.b.do(t, DELETE, "/locks/stuck?force=true", "", ops()...), http.StatusForbidden, api.ProblemForbidden)
		wantProblem(t, r.b.do(t, DELETE, "/locks/stuck?force=true", ""), http.StatusUnauthorized, api.ProblemUnauthorized)
		wantProblem(t, r.a.do(t, DELETE, "/locks/stuck?force=true", ""), http.StatusForbidden, api.ProblemForbidden)
		if res := r.b.do(t, DELETE, "/locks/stuck?force=true", "", bearerOf(redisOnCall)...); res.Status != http.StatusNoContent {
			t.Fatalf("force release by the on-call token: %s", res)
		}
		wantProblem(t, r.a.do(t, GET, "/locks/stuck", ""), http.StatusNotFound, api.ProblemNotHeld)
		wantProblem(t, r.b.do(t, DELETE, "/locks/stuck?force=true", "", bearerOf(redisOnCall)...), http.StatusNotFound, api.ProblemNotHeld)
		wantProblem(t, r.a.do(t, DELETE, "/locks/stuck", "", api.HeaderLeaseID, held.LeaseID), http.StatusNotFound, api.ProblemNotHeld)
		if next := r.a.acquire(t, "stuck", "", ""); next.FencingToken <= held.FencingToken {
			t.Errorf("next token %d, want above the broken lock's %d", next.FencingToken, held.FencingToken)
		}
	}},

	{"semaphores: 201 twice, 409 semaphore-full, GET, PATCH 200 and 412, DELETE 409, 204 and 404", func(t *testing.T, r *redisReplicas) {
		body := `{"permits":2,"ttl_ms":30000,"owner":"worker"}`
		a := r.a.do(t, PUT, "/semaphores/sem/permits", body).permit(t, http.StatusCreated)
		b := r.b.do(t, PUT, "/semaphores/sem/permits", body, ops()...).permit(t, http.StatusCreated)
		if a.Permits != 2 || a.Semaphore != "sem" || a.Permit == b.Permit {
			t.Fatalf("two permits: %+v %+v", a, b)
		}
		full := r.a.do(t, PUT, "/semaphores/sem/permits", body)
		if p := wantProblem(t, full, http.StatusConflict, api.ProblemSemaphoreFull); p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 {
			t.Errorf("semaphore-full without retry_after_ms: %s", full)
		}
		wantProblem(t, r.a.do(t, PUT, "/semaphores/sem/permits", `{"permits":3}`), http.StatusConflict, api.ProblemPermitsMismatch)

		info := r.a.do(t, GET, "/semaphores/sem", "")
		var si api.SemaphoreInfo
		if info.Status != http.StatusOK || json.Unmarshal(info.Body, &si) != nil || si.Permits != 2 || si.InUse != 2 ||
			strings.Contains(info.String(), a.LeaseID) || strings.Contains(info.String(), b.LeaseID) {
			t.Fatalf("GET: %s, want both permits in use and no lease id", info)
		}
		if res := r.a.do(t, http.MethodHead, "/semaphores/sem", ""); res.Status != http.StatusOK {
			t.Fatalf("HEAD: %s", res)
		}

		lease := func(p api.Permit, more ...string) []string {
			return append([]string{api.HeaderLeaseID, p.LeaseID}, more...)
		}
		ext := r.a.do(t, PATCH, permitURL("sem", a.Permit), `{"ttl_ms":60000}`, lease(a, ifMatch(a.FencingToken)...)...).permit(t, http.StatusOK)
		if ext.FencingToken != a.FencingToken || ext.TTLms != 60000 {
			t.Fatalf("extend: %+v", ext)
		}
		wantProblem(t, r.a.do(t, PATCH, permitURL("sem", a.Permit), "", lease(a, ifMatch(a.FencingToken+100)...)...), http.StatusPreconditionFailed, api.ProblemTokenMismatch)
		wantProblem(t, r.a.do(t, PATCH, permitURL("sem", b.Permit), "", lease(a)...), http.StatusConflict, api.ProblemHeldByOther)
		wantProblem(t, r.a.do(t, DELETE, permitURL("sem", b.Permit), "", lease(a)...), http.StatusConflict, api.ProblemHeldByOther)
		wantProblem(t, r.a.do(t, DELETE, permitURL("sem", a.Permit), "", lease(a, ifMatch(a.FencingToken+100)...)...), http.StatusPreconditionFailed, api.ProblemTokenMismatch)
		if res := r.b.do(t, DELETE, permitURL("sem", a.Permit), "", ops(lease(a)...)...); res.Status != http.StatusNoContent {
			t.Fatalf("release through the other replica: %s", res)
		}
		wantProblem(t, r.a.do(t, PATCH, permitURL("sem", a.Permit), "", lease(a)...), http.StatusNotFound, api.ProblemNotHeld)
		wantProblem(t, r.a.do(t, DELETE, permitURL("sem", a.Permit), "", lease(a)...), http.StatusNotFound, api.ProblemNotHeld)
		again := r.a.do(t, PUT, "/semaphores/sem/permits", body).permit(t, http.StatusCreated)
		if again.Permit != a.Permit || again.FencingToken <= a.FencingToken {
			t.Fatalf("the freed permit %d (token %d) taken again: %+v", a.Permit, a.FencingToken, again)
		}
		for _, p := range []api.Permit{again, b} {
			if res := r.a.do(t, DELETE, permitURL("sem", p.Permit), "", lease(p)...); res.Status != http.StatusNoContent {
				t.Fatalf("release permit %d: %s", p.Permit, res)
			}
		}
		wantProblem(t, r.a.do(t, GET, "/semaphores/sem", ""), http.StatusNotFound, api.ProblemNotHeld)
	}},
}
