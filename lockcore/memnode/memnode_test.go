package memnode_test

import (
	"testing"

	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
	"github.com/lockgate/lockgate/lockcore/nodetest"
)

func TestConformance(t *testing.T) {
	nodetest.Run(t, func(t *testing.T) lockcore.Node { return memnode.New(nil) })
}

func TestDataLoss(t *testing.T) {
	nodetest.RunDataLoss(t, func(t *testing.T) lockcore.Node { return memnode.New(nil) },
		func(t *testing.T, n lockcore.Node) { n.(*memnode.Node).LoseData() })
}

func TestRWConformance(t *testing.T) {
	nodetest.RunRW(t, func(t *testing.T) lockcore.Node { return memnode.New(nil) },
		func(t *testing.T, n lockcore.Node) { n.(*memnode.Node).LoseData() })
}

func TestRejoin(t *testing.T) {
	nodetest.RunRejoin(t, func(t *testing.T) lockcore.Node { return memnode.New(nil) },
		func(t *testing.T, n lockcore.Node) { n.(*memnode.Node).Restart() })
}
