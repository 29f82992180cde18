package lockcore

import (
	"reflect"
	"testing"
)

// TestStepNames: a scan step's names are examined sorted, once each, valid
// and past the cursor, at most as many as the page has room for.
func TestStepNames(t *testing.T) {
	for _, tc := range []struct {
		name     string
		names    []string
		after    string
		room     int
		want     []string
		wantFull bool
	}{
		{"sorted, duplicates once", []string{"c", "a", "b", "a"}, "", 10, []string{"a", "b", "c"}, false},
		{"past after only", []string{"a", "b", "c"}, "b", 10, []string{"c"}, false},
		{"invalid names left out", []string{"a", "bad name", "b"}, "", 10, []string{"a", "b"}, false},
		{"cut to room", []string{"a", "b", "c"}, "", 2, []string{"a", "b"}, true},
		{"exactly room is full", []string{"a", "b"}, "", 2, []string{"a", "b"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, full := stepNames(tc.names, tc.after, tc.room)
			if !reflect.DeepEqual(got, tc.want) || full != tc.wantFull {
				t.Errorf("stepNames = %q, %v; want %q, %v", got, full, tc.want, tc.wantFull)
			}
		})
	}
}

// TestCursorPast: a step done moves to the node's next step, or to the next
// node once the node's walk is over; what was examined is forgotten.
func TestCursorPast(t *testing.T) {
	c := listCursor{Prefix: "p", Node: 1, Scan: "7", After: "x", Skipped: 1}
	if got, want := c.past("9"), (listCursor{Prefix: "p", Node: 1, Scan: "9", Skipped: 1}); got != want {
		t.Errorf("past(9) = %+v, want %+v", got, want)
	}
	if got, want := c.past(""), (listCursor{Prefix: "p", Node: 2, Skipped: 1}); got != want {
		t.Errorf(`past("") = %+v, want %+v`, got, want)
	}
}

// TestListedHere: a lock is listed through the first scanned node, not
// skipped, of a quorum that holds it for one lease.
func TestListedHere(t *testing.T) {
	r := &Redlock{quorum: 2}
	held := func(lease string) []NodeLock { return []NodeLock{{Found: true, Lease: lease, Token: 1}} }
	for _, tc := range []struct {
		name  string
		views [][]NodeLock
		c     listCursor
		want  int // copies returned; 0 for nil
	}{
		{"first holder", [][]NodeLock{held("a"), held("a"), held("a")}, listCursor{Node: 0}, 3},
		{"listed at an earlier node", [][]NodeLock{held("a"), held("a"), held("a")}, listCursor{Node: 1}, 0},
		{"the earlier node skipped", [][]NodeLock{held("a"), held("a"), nil}, listCursor{Node: 1, Skipped: 1}, 2},
		{"no quorum for one lease", [][]NodeLock{held("a"), held("b"), {{}}}, listCursor{Node: 0}, 0},
		{"a quorum, this node not in it", [][]NodeLock{held("b"), held("a"), held("a")}, listCursor{Node: 0}, 0},
		{"a node that did not answer", [][]NodeLock{nil, held("a"), held("a")}, listCursor{Node: 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.listedHere(tc.views, 0, tc.c); len(got) != tc.want {
				t.Errorf("listedHere = %+v, want %d copies", got, tc.want)
			}
		})
	}
}
