package fencing_test

import (
	"testing"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/fencingtest"
)

func TestMemoryConforms(t *testing.T) {
	fencingtest.Run(t, fencing.NewMemory())
}
