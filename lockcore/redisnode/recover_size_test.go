package redisnode_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// sizedTTL is the TTL of the locks a sized recovery fills the nodes with:
// they must outlive filling a million of them and recovering them on a
// busy machine.
const sizedTTL = 30 * time.Minute

// fillBatch is how many locks fillLocks writes in one pipeline.
const fillBatch = 10_000

// sizedLock names lock k of a sized recovery, and its lease.
func sizedLock(k int) (resource, lease string) {
	return "sized-" + strconv.Itoa(k), "lease-" + strconv.Itoa(k)
}

// fillLocks makes every server of srvs hold n locks, each for the same
// lease, token and expiry on every server, as a gateway's grants leave
// them (the servers share this machine's clock). It writes the lock hashes
// straight into the servers, in acquire.lua's format, in pipelines of
// fillBatch: a million grants through the gateway would take minutes.
func fillLocks(t *testing.T, srvs []*redistest.Server, n int) {
	t.Helper()
	ctx := context.Background()
	expires := time.Now().Add(sizedTTL)
	for _, s := range srvs {
		rdb := connect(t, s).Client()
		for from := 0; from < n; from += fillBatch {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for k := from; k < min(from+fillBatch, n); k++ {
					res, lease := sizedLock(k)
					key := "lockgate:{" + res + "}:lock"
					p.HSet(ctx, key, "lease", lease, "tok", k+1, "owner", "sized", "ttl", sizedTTL.Milliseconds(), "by", "")
					p.PExpireAt(ctx, key, expires)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("filling %s: %v", s.Addr(), err)
			}
		}
	}
}

// checkAdopted fails t unless srv holds each of the n locks of fillLocks
// for its lease, with at least half of sizedTTL to live.
func checkAdopted(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	ctx := context.Background()
	rdb := connect(t, srv).Client()
	for from := 0; from < n; from += fillBatch {
		leases := make([]*redis.StringCmd, 0, fillBatch)
		ttls := make([]*redis.DurationCmd, 0, fillBatch)
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k := from; k < min(from+fillBatch, n); k++ {
				res, _ := sizedLock(k)
				leases = append(leases, p.HGet(ctx, "lockgate:{"+res+"}:lock", "lease"))
				ttls = append(ttls, p.PTTL(ctx, "lockgate:{"+res+"}:lock"))
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		for i, c := range leases {
			res, lease := sizedLock(from + i)
			if c.Val() != lease || ttls[i].Val() < sizedTTL/2 {
				t.Fatalf("after the recovery %s holds %s for %q with %v to live, want %q with at least %v",
					srv.Addr(), res, c.Val(), ttls[i].Val(), lease, sizedTTL/2)
			}
		}
	}
}

// recoverSized fills three nodes with n held locks, restarts the first
// empty and returns how long it took to serve again (from its restart:
// the loss found, its quarantine, and the recovery of every lock from the
// other two), once checkAdopted found every lock on it. within bounds the
// wait: a recovery not done by then fails t.
func recoverSized(t *testing.T, n int, within time.Duration) time.Duration {
	t.Helper()
	srvs := redistest.StartN(t, 3, nil)
	opts := recoverOptions()
	opts.MaxTTL = time.Hour // only a recovery brings the node back within the test
	rl := gatewayOver(t, urlsOf(srvs), true, opts, nil)
	cycle(t, rl, "sized")
	fillLocks(t, srvs, n)
	restartEmpty(t, srvs[0])
	restarted := time.Now()
	// The gateway's own view, polled: checks of the node's own at this
	// pace would take a good share of the server the recovery writes to.
	// It serves again once the gateway saw it out of service, then in.
	serving := func() bool { return rl.NodeReports()[0].State == lockcore.NodeServing }
	out := false
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s := serving(); !s {
			out = true
		} else if out {
			break
		}
	}
	if !out || !serving() || !inService(health(t, srvs[0])) {
		t.Fatalf("%d held locks: the restarted node is still not in service %v after its restart (%+v)",
			n, within, rl.NodeReports()[0])
	}
	took := time.Since(restarted)
	checkAdopted(t, srvs[0], n)
	return took
}

// loadAverage is the machine's load average as /proc/loadavg has it, for
// the figures of a timed run ("" where there is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// TestARecoveryTakesInEveryHeldLock: a node restarted empty while the
// others hold 20,000 locks (ten pages or so of every source) serves again
// holding every one of them for its lease, with its remaining time to
// live. The figures at larger sizes come from TestARecoveryAtSize
// (recover_size_tagged_test.go).
func TestARecoveryTakesInEveryHeldLock(t *testing.T) {
	const n = 20_000
	took := recoverSized(t, n, 2*time.Minute)
	t.Logf("%d held locks: back in service %v after an empty restart (load %s)", n, took.Round(time.Millisecond), loadAverage())
}
