package redisnode_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockgate/lockgate/chaos/model"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
)

// lockHistory records a test's lock calls on one node, on one monotonic
// clock, for the fenced mutex model of chaos/model: the same check the
// fault suite runs over its histories, here over a history that a
// reverted protection breaks.
type lockHistory struct {
	t0  time.Time
	ops []model.Op
}

// acquire asks n for resource with lease and records the call: granted
// (Ok, with the node's token and validity ttl) or refused (Fail).
func (h *lockHistory) acquire(n lockcore.Node, client int, resource, lease string, ttl time.Duration) error {
	o := model.Op{Client: client, Kind: model.Acquire, Key: resource, Lease: lease, Invoke: time.Since(h.t0), Outcome: model.Fail}
	r, err := n.Acquire(context.Background(), lockcore.NodeAcquire{Resource: resource, Lease: lease, TTL: ttl})
	o.Complete = time.Since(h.t0)
	if err == nil && (r.Status == lockcore.StatusGranted || r.Status == lockcore.StatusReentered) {
		o.Outcome, o.Token, o.Valid = model.Ok, uint64(r.Token), ttl
	}
	o.Detail = "node answered " + errString(err)
	h.ops = append(h.ops, o)
	return err
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// linearizable fails t unless the history is linearizable against the
// fenced mutex; it writes porcupine's history viewer for a failing one.
func (h *lockHistory) linearizable(t *testing.T) {
	t.Helper()
	r := model.Check("mutex", model.Mutex, model.History(h.ops, false), time.Minute)
	if r.Verdict == "Ok" {
		t.Logf("%v", r)
		return
	}
	path := filepath.Join(os.TempDir(), "lockgate-"+filepath.Base(t.Name())+"-mutex.html")
	if err := r.Visualize(path); err != nil {
		t.Log(err)
	}
	t.Fatalf("%v: not linearizable; history viewer: %s", r, path)
}

// A Check's probe reaches the node's process; before it records its
// verdict, the server is killed and restarted from a copy of its data
// taken before L1 was granted (a restore from backup, or a failover to a
// lagging replica behind the same name). L2 then asks for L1's resource.
// The fenced mutex model must accept the history: the node may not grant
// L2 while L1's validity lasts. (With record trusting whatever process
// the newest connection reaches, as before 813c20a, L2 is granted.)
func TestModelCheckACheckRacedByARestore(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{AOF: true})
	n := newNode(t, srv)
	wantServing(t, n, "check before the copy")
	aof := filepath.Join(srv.Dir(), "appendonlydir")
	backup := filepath.Join(t.TempDir(), "aof")
	if err := os.CopyFS(backup, os.DirFS(aof)); err != nil {
		t.Fatal(err)
	}
	h := &lockHistory{t0: time.Now()}
	if err := h.acquire(n, 0, "x", "l1", time.Minute); err != nil {
		t.Fatal("L1:", err)
	}
	ctx := context.Background()
	n.SetAfterProbe(func() {
		n.SetAfterProbe(nil)
		srv.Kill()
		if err := os.RemoveAll(aof); err != nil {
			t.Error(err)
		}
		if err := os.CopyFS(aof, os.DirFS(backup)); err != nil {
			t.Error(err)
		}
		srv.Restart()
		if !poll(10*time.Second, func() bool { return n.Client().Ping(ctx).Err() == nil }) {
			t.Error("no connection to the restored server")
		}
	})
	if _, err := n.Check(ctx); err != nil {
		t.Log("check raced by the restore:", err)
	}
	_ = h.acquire(n, 1, "x", "l2", time.Minute)
	h.linearizable(t)
}

// A primary in service fails over and back: a replica that detached
// before L1 was granted is promoted, the primary resyncs from it (losing
// L1) and is promoted again, the same process with another replication
// history. L2 then asks for L1's resource. The fenced mutex model must
// accept the history: a Check finds the failback a loss, so L2 is
// refused. (With the node record naming the run id only, as before
// 3ffe2ca, the node serves and grants L2.)
func TestModelCheckAFailbackThatLostAGrant(t *testing.T) {
	p := redistest.Start(t, primaryOpts())
	n := newNode(t, p)
	q := attachReplica(t, p)
	wantServing(t, n, "check with the replica attached")
	waitInSync(t, q)
	if _, err := q.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	h := &lockHistory{t0: time.Now()}
	if err := h.acquire(n, 0, "x", "l1", time.Minute); err != nil {
		t.Fatal("L1:", err)
	}
	replicate(t, p, q) // p takes q's data: without L1
	waitInSync(t, p)
	if _, err := p.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	h2, err := n.Check(context.Background())
	t.Logf("check after the failback: lost %v (%s), %v", h2.Lost, h2.Reason, err)
	_ = h.acquire(n, 1, "x", "l2", time.Minute)
	h.linearizable(t)
}

// grant asks rl for req and records the call: granted (Ok, with the token
// and the validity answered) or refused (Fail).
func (h *lockHistory) grant(rl *lockcore.Redlock, client int, req lockcore.AcquireRequest) (*lockcore.Lease, error) {
	o := model.Op{Client: client, Kind: model.Acquire, Key: req.Resource, Invoke: time.Since(h.t0), Outcome: model.Fail}
	l, err := rl.Acquire(context.Background(), req)
	o.Complete = time.Since(h.t0)
	if err == nil {
		o.Outcome, o.Lease, o.Token, o.Valid = model.Ok, l.ID, uint64(l.Token), l.Validity
	} else {
		o.Lease = req.LeaseID
	}
	o.Detail = "gateway answered " + errString(err)
	h.ops = append(h.ops, o)
	return l, err
}
