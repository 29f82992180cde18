package redisnode_test

import (
	"testing"

	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/nodetest"
	"github.com/lockgate/lockgate/lockcore/redisnode"
)

// newNode connects a Node to srv and closes it when t ends.
func newNode(t testing.TB, srv *redistest.Server) *redisnode.Node {
	t.Helper()
	n, err := redisnode.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t, nil)
	nodetest.Run(t, func(t *testing.T) lockcore.Node { return newNode(t, srv) })
}
