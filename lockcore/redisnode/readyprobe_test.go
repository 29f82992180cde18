package redisnode_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/redistest"
)

// probe runs deploy/redis/ready.lua, the readiness probe docs/operations.md
// gives for Redis pods, on srv.
func probe(t *testing.T, srv *redistest.Server) string {
	t.Helper()
	src, err := os.ReadFile("../../deploy/redis/ready.lua")
	if err != nil {
		t.Fatal(err)
	}
	v, err := connect(t, srv).Client().Eval(context.Background(), string(src), nil).Text()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTheProbesAreOne: the Kubernetes overlay's ConfigMap carries a copy
// of deploy/redis/ready.lua (kustomize reads files only under its own
// directory); it must be the same script.
func TestTheProbesAreOne(t *testing.T) {
	a, errA := os.ReadFile("../../deploy/redis/ready.lua")
	b, errB := os.ReadFile("../../deploy/kubernetes/overlays/redis/ready.lua")
	if errA != nil || errB != nil || string(a) != string(b) {
		t.Fatalf("deploy/kubernetes/overlays/redis/ready.lua differs from deploy/redis/ready.lua (%v, %v): copy it again", errA, errB)
	}
}

// TestTheReadinessProbeFollowsRecovery: the probe answers "serving" only
// while the node is in service, so a rolling restart paced by readiness
// (a StatefulSet's) restarts a node only once the one before has
// recovered: a node restarted while another still recovers from it would
// leave nobody to recover from, and both out for the largest TTL.
func TestTheReadinessProbeFollowsRecovery(t *testing.T) {
	srvs := redistest.StartN(t, 3, &redistest.Options{AOF: true})
	a := srvs[0]
	if got := probe(t, a); got != "not serving" {
		t.Errorf("a new node: %q, want not serving (a StatefulSet of such nodes starts its pods in parallel)", got)
	}
	opts := recoverOptions()
	opts.CheckInterval = time.Second
	rl := gateway(t, srvs, opts)
	if err := rl.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := probe(t, a); got != "serving" {
		t.Fatalf("an initialized node: %q, want serving", got)
	}
	for _, restart := range []struct {
		name string
		do   func()
	}{{"restarted with its AOF", a.Restart}, {"restarted empty", func() { restartEmpty(t, a) }}} {
		restart.do()
		if got := probe(t, a); got != "not serving" {
			t.Errorf("%s, before a gateway recovered it: %q, want not serving", restart.name, got)
		}
		waitUntil(t, "A recovered", func() bool { return inService(health(t, a)) })
		if got := probe(t, a); got != "serving" {
			t.Errorf("%s, once recovered: %q, want serving", restart.name, got)
		}
	}
}
