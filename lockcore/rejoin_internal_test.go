package lockcore

import (
	"errors"
	"slices"
	"testing"
)

// TestWhole is rule 8's judgement of which nodes hold every lock they
// acknowledged, from one pass's checks.
func TestWhole(t *testing.T) {
	serving := func(id string, at int64, seen map[string]int64) checkResult {
		return checkResult{h: NodeHealth{Initialized: true, ID: id, ServedAt: at, Witnessed: seen, Durable: true}}
	}
	restarted := func(id string, at int64, seen map[string]int64) checkResult {
		c := serving(id, at, seen)
		c.h.Quarantined = true
		return c
	}
	down := checkResult{err: errors.New("down")}
	for _, tc := range []struct {
		name string
		res  []checkResult
		want []int
	}{
		{"every node in service", []checkResult{serving("a", 10, nil), serving("b", 10, nil), serving("c", 10, nil)}, []int{0, 1, 2}},
		{"every node restarted, as the others saw them",
			[]checkResult{restarted("a", 10, map[string]int64{"b": 10, "c": 10}), restarted("b", 10, map[string]int64{"a": 10, "c": 9}), restarted("c", 10, map[string]int64{"a": 9, "b": 10})},
			[]int{0, 1, 2}},
		{"a node does not answer: no witness goes unheard",
			[]checkResult{restarted("a", 10, nil), restarted("b", 10, nil), down}, nil},
		{"a node back from an older copy",
			[]checkResult{restarted("a", 5, map[string]int64{"b": 10}), restarted("b", 10, map[string]int64{"a": 10}), restarted("c", 10, map[string]int64{"a": 10, "b": 10})},
			[]int{1, 2}},
		{"two copies of one moment beside a node that kept its data",
			[]checkResult{restarted("a", 5, map[string]int64{"b": 5}), restarted("b", 5, map[string]int64{"a": 5}), serving("c", 10, map[string]int64{"a": 10, "b": 10})},
			[]int{2}},
		{"a copy of another node's data",
			[]checkResult{restarted("b", 10, nil), restarted("b", 10, nil), restarted("c", 10, nil)},
			[]int{2}},
		{"not durable", []checkResult{restarted("a", 10, nil), serving("b", 10, nil), func() checkResult {
			c := restarted("c", 10, nil)
			c.h.Durable = false
			return c
		}()}, []int{0, 1}},
		{"never served (no ID)", []checkResult{restarted("", 0, nil), serving("b", 10, nil), serving("c", 10, nil)}, []int{1, 2}},
		{"lost, not yet quarantined", []checkResult{func() checkResult {
			c := serving("a", 10, nil)
			c.h.Lost = true
			return c
		}(), serving("b", 10, nil), serving("c", 10, nil)}, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := whole(tc.res); !slices.Equal(got, tc.want) {
				t.Errorf("whole = %v, want %v", got, tc.want)
			}
		})
	}
}
