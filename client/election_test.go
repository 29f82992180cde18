package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
)

// nextLeader returns the observation's next leader, failing t after a
// long bound (a hang, not a timing goal).
func nextLeader(t *testing.T, ch <-chan client.Leader) client.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("the observation ended")
		}
		return l
	case <-time.After(15 * time.Second):
		t.Fatal("no leader change seen within 15s")
	}
	return client.Leader{}
}

func TestCampaignObserveResign(t *testing.T) {
	g := startGateway(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t, g.URL)

	obs := c.Observe(ctx, "leader")
	if l := nextLeader(t, obs); l.Term != 0 {
		t.Fatalf("first observation %+v, want no leader", l)
	}
	a, err := c.Campaign(ctx, "leader", &client.LockOptions{TTL: 2 * time.Second, Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, obs); l.Term != a.FencingToken() || l.Owner != "a" {
		t.Fatalf("observed %+v, want a with term %d", l, a.FencingToken())
	}

	type result struct {
		l   *client.Lock
		err error
	}
	bch := make(chan result, 1)
	go func() {
		l, err := c.Campaign(ctx, "leader", &client.LockOptions{TTL: 2 * time.Second, Owner: "b", Wait: 5 * time.Second})
		bch <- result{l, err}
	}()
	if err := a.Release(ctx); err != nil { // resign
		t.Fatal(err)
	}
	var b result
	select {
	case b = <-bch:
	case <-time.After(15 * time.Second):
		t.Fatal("b did not become leader after a resigned")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.l.Release(ctx)
	if b.l.FencingToken() <= a.FencingToken() {
		t.Fatalf("terms %d then %d: not increasing", a.FencingToken(), b.l.FencingToken())
	}
	// The observer sees b's term once, maybe after a moment without a
	// leader, never a's again.
	for {
		l := nextLeader(t, obs)
		if l.Term == 0 {
			continue
		}
		if l.Term != b.l.FencingToken() || l.Owner != "b" {
			t.Fatalf("observed %+v, want b with term %d", l, b.l.FencingToken())
		}
		break
	}
	select {
	case l := <-obs:
		t.Fatalf("observed %+v after b, while b leads", l)
	default:
	}
}
