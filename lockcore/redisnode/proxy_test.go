package redisnode_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/faultproxy"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// TestAProcessBehindAConnectionKeepingProxyServesNoLock: node A sits behind
// a proxy that keeps its clients' connections open and dials the new
// server behind them (as managed Redis endpoints that hide failovers do),
// so the gateway sees no new connection when A is replaced. L1 is granted
// on A and B (C's link cut); A comes back from an older copy of its data,
// without L1; the gateway checks nothing meanwhile (its checks run once
// an hour). A lock script that reaches the new process must be refused:
// the scripts a gateway calls exist only in the processes its checks
// judged (redisnode's bound scripts). Without that, L2 was granted on A
// and C while L1 held.
func TestAProcessBehindAConnectionKeepingProxyServesNoLock(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a, b := srvs[0], srvs[2] // node 1, C, is the one whose link gatewayCutOff cuts
	for _, s := range srvs {
		initializeServer(t, s)
	}
	p, err := faultproxy.Start(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetKeepClients(true)
	urls := urlsOf(srvs)
	urls[0] = "redis://" + p.Addr()
	var cut atomic.Bool
	opts := recoverOptions()
	opts.CheckInterval = time.Hour
	g := gatewayOver(t, urls, true, opts, cutNode1(&cut))
	if err := g.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	copied := copyAOF(t, a) // before L1
	cut.Store(true)
	l1 := acquireWithin(t, g, lockcore.AcquireRequest{Resource: "r", TTL: recoverTTL}, 3*time.Second)
	cut.Store(false)
	accepted := p.Stats().Accepted
	restoreAOF(t, a, copied)
	waitUntil(t, "the proxy dialed the new process behind its clients", func() bool { return p.Stats().Redialed > 0 })

	if l2 := secondHolder(t, g, b, "r", l1); l2 != nil {
		t.Fatalf("L2 granted (token %d) by A's new process behind the proxy while L1 (token %d) holds", l2.Token, l1.Token)
	}
	t.Logf("proxy: %d client connections before the restore, %+v after", accepted, p.Stats())
}
