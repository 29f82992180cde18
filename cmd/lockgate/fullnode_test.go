package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
)

// fill sets srv's maxmemory a little above what it uses and writes junk
// keys until it refuses with OOM, then keeps it full until release (or
// the test's end): used_memory can drop after fill returns (the AOF
// buffer written late on a loaded machine, query buffers freed), and a
// node that settles more than the gateway's reserve below its limit would
// count as serving again.
func fill(t *testing.T, srv *redistest.Server) *filled {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used := infoInt(t, info, "used_memory")
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	junk := strings.Repeat("x", 16<<10)
	for i := range 10000 {
		err := rdb.Set(ctx, fmt.Sprintf("junk:%d", i), junk, 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "OOM") {
			f := &filled{rdb: rdb, stop: make(chan struct{}), done: make(chan struct{})}
			// Lower the limit below what it holds once settled, and keep
			// it there: every write now fails.
			for above, deadline := 0, time.Now().Add(5*time.Second); above < 3; {
				time.Sleep(100 * time.Millisecond)
				if f.keepFull(t) {
					above++ // above the limit three reads in a row
					continue
				}
				above = 0
				if time.Now().After(deadline) {
					t.Fatal("memory stays below the limit")
				}
			}
			go f.keep(t)
			t.Cleanup(f.halt)
			return f
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the node never filled up")
	return nil
}

// filled is a node that fill made full.
type filled struct {
	rdb        *redis.Client
	stop, done chan struct{}
	once       sync.Once
}

// keepFull lowers the node's maxmemory 1 KiB below what it uses when it
// uses no more than that, and reports whether it used more.
func (f *filled) keepFull(t *testing.T) bool {
	ctx := context.Background()
	info, err := f.rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Error(err)
		return false
	}
	used, limit := infoInt(t, info, "used_memory"), infoInt(t, info, "maxmemory")
	if used > limit {
		return true
	}
	if err := f.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-1<<10, 10)).Err(); err != nil {
		t.Error(err)
	}
	return false
}

// keep runs keepFull every 50 ms until halt.
func (f *filled) keep(t *testing.T) {
	defer close(f.done)
	for {
		select {
		case <-f.stop:
			return
		case <-time.After(50 * time.Millisecond):
			f.keepFull(t)
		}
	}
}

// halt stops keeping the node full.
func (f *filled) halt() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

// release stops keeping the node full and deletes the junk keys, which
// brings it some 2 MiB below its limit.
func (f *filled) release(t *testing.T) {
	f.halt()
	keys, err := f.rdb.Keys(context.Background(), "junk:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
}

func infoInt(t *testing.T, info, field string) int64 {
	t.Helper()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO", field)
	return 0
}

// A node that reached maxmemory (noeviction) refuses writes: it answers
// PING but no lock can be taken on it. Two of three full turn /readyz to
// 503 (it was 200 while PUT answered 503 before), the metric and the log
// say why (the 503 body names no node), and freeing the memory brings the
// gateway back.
func TestAFullNodeIsNotReady(t *testing.T) {
	nodes := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	g := startGateway(t, []string{"-redis", redisURLs(nodes)}, nil)
	g.eventually(t, "/readyz", http.StatusOK)

	full := []*filled{fill(t, nodes[0])}
	g.eventually(t, "/readyz", http.StatusOK) // one of three: still a quorum
	full = append(full, fill(t, nodes[1]))
	g.eventually(t, "/readyz", http.StatusServiceUnavailable)
	// The complaint: PUTs failing while /readyz said ready. Take
	// locks until the full nodes refuse them; /readyz must then say 503.
	refused := false
	for i := 0; i < 5000 && !refused; i++ {
		put := g.do(t, http.MethodPut, fmt.Sprintf("/locks/when-full-%d", i), `{"ttl_ms":60000}`)
		refused = put.status == http.StatusServiceUnavailable
	}
	if !refused {
		t.Fatal("5000 locks fitted on two nodes filled to maxmemory")
	}
	if a := g.do(t, http.MethodGet, "/readyz", ""); a.status != http.StatusServiceUnavailable {
		t.Errorf("PUT answers 503 while /readyz answers %d", a.status)
	}
	m := g.scrape(t)
	for _, n := range nodes[:2] {
		series := fmt.Sprintf(`lockgate_node_refusing{node=%q,reason="out of memory"}`, n.Addr())
		if m[series] != 1 {
			t.Errorf("%s = %v, want 1", series, m[series])
		}
		state := fmt.Sprintf(`lockgate_node_state{node=%q,state="refusing"}`, n.Addr())
		if m[state] != 1 {
			t.Errorf("%s = %v, want 1", state, m[state])
		}
	}
	if !strings.Contains(g.log.String(), `"reason":"out of memory"`) {
		t.Errorf("the log does not name the cause:\n%s", g.log)
	}

	for _, f := range full {
		f.release(t)
	}
	g.eventually(t, "/readyz", http.StatusOK)
	if put := g.do(t, http.MethodPut, "/locks/when-freed", `{"ttl_ms":1000}`); put.status != http.StatusCreated {
		t.Errorf("PUT after freeing: %d %s", put.status, put.body)
	}
	if m := g.scrape(t); m[fmt.Sprintf(`lockgate_node_state{node=%q,state="serving"}`, nodes[0].Addr())] != 1 {
		t.Errorf("node 0 not reported serving again")
	}
}
