package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestMarkdownReportsWhatTheRunFound(t *testing.T) {
	events := []Event{
		acq("r", "L1", 9, 0, 10, 1000), rel("r", "L1", 20, 30, Ok), acq("r", "L2", 5, 40, 50, 1000),
		{Op: OpWrite, Resource: "r", Lease: "L2", Token: 5, Outcome: Fail, Stale: true},
		{Op: OpAcquire, Resource: "r", Lease: "L3", Status: 503, Outcome: Fail, Invoke: ms(60), Complete: ms(70)},
	}
	faults := []Fault{
		{Kind: kindEmpty, Target: "node 0", Start: ms(0), End: ms(100), Nodes: []int{0}, DataLoss: true},
		{Kind: kindStop, Target: "node 1", Start: ms(200), End: ms(300), Nodes: []int{1}},
	}
	s := &Summary{Profile: "long", Seed: 42, Started: time.Unix(0, 0), Duration: 12 * time.Minute, Clients: 32,
		Nodes: 5, Gateways: 3, TTL: time.Second, Bound: 3 * time.Second, Events: events, Faults: faults,
		C2: CheckC2(events), Refused: 1, MemBefore: []NodeMemory{{Keys: 0, UsedMemory: 1000}},
		MemAfter: []NodeMemory{{Keys: 7, UsedMemory: 2000}}, MaxFaultyNodes: 1, WipedNodes: []int{0}}
	_, s.Gaps = CheckC4(events, faults, s.Bound, s.Bound, s.Duration)
	s.Unprotected = &Summary{Seed: 7, C2: s.C2}
	md := s.Markdown()
	for _, want := range []string{
		"LOCKGATE_CHAOS_SEED=42",
		"| C2 | tokens unique per resource; a grant begun after another ended has a higher token | **1 violations** |",
		"| C5 | a stale or foreign lease never extended or released another's lock | none |",
		"| A | answers stay true: a lease's first grant answers 201, a holder's release in time is not 404 | none |",
		"Stale writes refused by the fenced register: **1**",
		"| acquire | 2 | 1 | 0 | 201×2 503×1 |",
		"| restart-empty | 1 | 100ms |",
		"| sigstop | 1 | 100ms |",
		"| 0 | 0 | 7 | 1000 | 2000 |",
		"## With the protection off",
		"C2 **1 violations**, C3 none",
		"## What is not guaranteed",
		"A majority of the nodes losing data at once",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestMaxFaulty(t *testing.T) {
	f := func(start, end int, dataLoss bool, nodes ...int) Fault {
		return Fault{Start: ms(start), End: ms(end), DataLoss: dataLoss, Nodes: nodes}
	}
	tests := []struct {
		name   string
		faults []Fault
		want   int
	}{
		{"one after another", []Fault{f(0, 100, false, 0), f(200, 300, false, 1)}, 1},
		{"two nodes in one fault", []Fault{f(0, 100, false, 3, 4)}, 2},
		{"a wiped node counts until the healing gap ends", []Fault{f(0, 100, true, 0), f(200, 300, false, 1, 2)}, 3},
		{"after the healing gap it does not", []Fault{f(0, 100, true, 0), f(700, 800, false, 1, 2)}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MaxFaulty(tc.faults, ms(500)); got != tc.want {
				t.Errorf("MaxFaulty = %d, want %d", got, tc.want)
			}
		})
	}
}
