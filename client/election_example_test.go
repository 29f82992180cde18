package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// Elect a leader: two candidates campaign, an observer follows the terms.
// The term is the fencing token: every new leader's is higher.
func ExampleClient_Campaign() {
	locker, _ := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	defer locker.Close()
	h, _ := handlers.New(locker, nil)
	gateway := httptest.NewServer(h)
	defer gateway.Close()
	c, _ := client.New(gateway.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	observed := c.Observe(ctx, "scheduler")
	fmt.Println("leader at first:", (<-observed).Term) // 0: nobody leads

	a, err := c.Campaign(ctx, "scheduler", &client.LockOptions{TTL: 10 * time.Second, Owner: "node-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	l := <-observed
	fmt.Println("observed", l.Owner, "term is a's:", l.Term == a.FencingToken())

	elected := make(chan *client.Lock)
	go func() {
		b, _ := c.Campaign(ctx, "scheduler", &client.LockOptions{TTL: 10 * time.Second, Owner: "node-b"})
		elected <- b
	}()
	_ = a.Release(ctx) // node-a resigns
	b := <-elected
	fmt.Println("node-b leads in a higher term:", b.FencingToken() > a.FencingToken())
	for l := range observed {
		if l.Term != 0 { // the election may be seen without a leader in between
			fmt.Println("observed", l.Owner)
			break
		}
	}
	_ = b.Release(ctx)
	// Output:
	// leader at first: 0
	// observed node-a term is a's: true
	// node-b leads in a higher term: true
	// observed node-b
}
