package watch_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/watch"
)

// Follow a lock: its state first, then every change, each with the token
// of the holder that came or went, never a lease id.
func ExampleHub_Subscribe() {
	rl, _ := lockcore.New([]lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}, nil)
	defer rl.Close()
	hub := watch.New(rl, nil)
	defer hub.Close()
	ctx := context.Background()

	s, _ := hub.Subscribe("invoices")
	defer s.Close()
	ev := <-s.C
	fmt.Println(ev.Kind, ev.Held)

	l, _ := rl.Acquire(ctx, lockcore.AcquireRequest{Resource: "invoices", TTL: time.Minute, Owner: "billing-1"})
	hub.Changed("invoices", watch.Acquired) // what the handlers do after an acquisition
	ev = <-s.C
	fmt.Println(ev.Kind, ev.Owner, ev.Token == l.Token)

	_ = rl.Release(ctx, lockcore.ReleaseRequest{Resource: "invoices", LeaseID: l.ID}) // announced by the nodes
	ev = <-s.C
	fmt.Println(ev.Kind, ev.Token == l.Token)
	// Output:
	// state false
	// acquired billing-1 true
	// released true
}
