package quorum_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lockcore/internal/quorum"
)

// vote is a node's answer: whether it agreed.
type vote struct {
	node int
	yes  bool
	err  error
}

func (v vote) Failed() bool { return v.err != nil }

// A call over three nodes decided once two agreed; the third node's answer
// comes late and is acted on in the background.
func ExampleRun() {
	g := quorum.New(quorum.Config{Nodes: 3, Quorum: 2, Timeout: time.Second})
	defer g.Close()
	slow := make(chan struct{})
	unheard := []vote{{node: 0}, {node: 1}, {node: 2}}
	c := quorum.Run(context.Background(), g, unheard, func(ctx context.Context, i int) vote {
		if i == 2 {
			<-slow
		}
		return vote{node: i, yes: true}
	}, func(v quorum.View[vote]) bool {
		yes := 0
		for i, a := range v.Answers {
			if v.Heard[i] && a.yes {
				yes++
			}
		}
		return yes >= 2
	})
	fmt.Println("complete:", c.Complete())
	done := make(chan struct{})
	c.Rest(func(v vote) { fmt.Println("late: node", v.node, "yes", v.yes) }, func() { close(done) })
	close(slow)
	<-done
	// Output:
	// complete: false
	// late: node 2 yes true
}
