package lockcore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
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
