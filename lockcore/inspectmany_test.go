package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

// brokenLister is a node whose InspectLocks fails.
type brokenLister struct{ *memnode.Node }

func (brokenLister) InspectLocks(context.Context, []string) ([]lockcore.NodeLock, error) {
	return nil, errors.New("broken")
}

// notLister is a node that is no lockcore.Lister.
type notLister struct{ lockcore.Node }

// InspectMany reports for each name what Inspect does, in one round; a
// minority of failing nodes does not matter, a majority is no quorum.
func TestInspectManyReportsWhatInspectDoes(t *testing.T) {
	ctx := context.Background()
	a, b, c := memnode.New(nil), memnode.New(nil), memnode.New(nil)
	rl, err := lockcore.New([]lockcore.Node{a, b, c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	for _, res := range []string{"x", lockcore.PermitResource("s", 3)} {
		if _, err := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: res, TTL: time.Minute, Owner: "o-" + res}); err != nil {
			t.Fatal(err)
		}
	}
	// "minority" is held on one node only: no lease holds it.
	if _, err := a.Acquire(ctx, lockcore.NodeAcquire{Resource: "minority", Lease: lockcore.NewLeaseID(), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	names := []string{"x", "free", lockcore.PermitResource("s", 3), lockcore.PermitResource("s", 4), "minority"}
	check := func(t *testing.T, rl *lockcore.Redlock) {
		t.Helper()
		got, err := rl.InspectMany(ctx, names)
		if err != nil || len(got) != len(names) {
			t.Fatalf("%v, %v", got, err)
		}
		for i, name := range names {
			want, err := rl.Inspect(ctx, name)
			if errors.Is(err, lockcore.ErrNotHeld) {
				if got[i] != nil {
					t.Errorf("%s: %+v, want nil (not held)", name, got[i])
				}
				continue
			}
			if err != nil || got[i] == nil || got[i].Resource != name || got[i].Token != want.Token || got[i].Owner != want.Owner || got[i].Remaining <= 0 {
				t.Errorf("%s: %+v, want %+v (%v)", name, got[i], want, err)
			}
		}
	}
	check(t, rl)

	oneBroken, err := lockcore.New([]lockcore.Node{a, b, brokenLister{c}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer oneBroken.Close()
	check(t, oneBroken)

	twoBroken, err := lockcore.New([]lockcore.Node{a, brokenLister{b}, brokenLister{c}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer twoBroken.Close()
	if _, err := twoBroken.InspectMany(ctx, names); !errors.Is(err, lockcore.ErrNoQuorum) {
		t.Fatalf("two of three failing: %v, want ErrNoQuorum", err)
	}

	noList, err := lockcore.New([]lockcore.Node{a, b, notLister{c}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer noList.Close()
	if _, err := noList.InspectMany(ctx, names); !errors.Is(err, lockcore.ErrNotSupported) {
		t.Fatalf("a node that is no Lister: %v, want ErrNotSupported", err)
	}
	var inv *lockcore.InvalidError
	if _, err := rl.InspectMany(ctx, []string{"x", "a b"}); !errors.As(err, &inv) {
		t.Fatalf("a bad name: %v, want InvalidError", err)
	}
}

// TestInspectReportsTheTokenAQuorumCarries: a late grant leaves a copy of
// the holder's lease with a higher token on one node (until it is given
// back); Inspect reports the token the holder was answered, which a
// quorum of the copies carries, not the highest copy's, which an election
// observer would take for a term no leader was given.
func TestInspectReportsTheTokenAQuorumCarries(t *testing.T) {
	ctx := context.Background()
	mems := []*memnode.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}
	rl, err := lockcore.New([]lockcore.Node{mems[0], mems[1], mems[2]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	l := nodetest.MustAcquire(t, rl, lockcore.AcquireRequest{Resource: "term", TTL: time.Minute})
	lockcore.Settle(rl)
	// Node 2's copy as a late grant leaves it: the same lease, its counter
	// spent once more.
	if _, err := mems[2].Release(ctx, "term", l.ID, 0); err != nil {
		t.Fatal(err)
	}
	late, err := mems[2].Acquire(ctx, lockcore.NodeAcquire{Resource: "term", Lease: l.ID, TTL: time.Minute})
	if err != nil || late.Token <= l.Token {
		t.Fatalf("late copy: %+v, %v; want a token above %d", late, err, l.Token)
	}
	info, err := rl.Inspect(ctx, "term")
	if err != nil || info.Token != l.Token {
		t.Fatalf("Inspect: %+v, %v; want the holder's token %d (node 2's copy carries %d)", info, err, l.Token, late.Token)
	}
}
