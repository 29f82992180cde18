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
	s.Outside = []Violation{{Check: "C2", Resource: "r", At: ms(40), Detail: "a clock step"}}
	md := s.Markdown()
	for _, want := range []string{
		"LOCKGATE_CHAOS_SEED=42",
		"| C2 | tokens unique per resource; a grant begun after another ended has a higher token | **1 violations** |",
		"| C5 | a stale or foreign lease never extended or released another's lock | none |",
		"| A | answers stay true: a lease's first grant answers 201, a holder's release in time is not 404 | none |",
		"Stale writes refused by the fenced register: **1**",
		"| acquire | 2 | 1 | 0 | 201×2 503×1 |",
		"Answers 503: **1** while a fault, or its recovery bound after it healed, could explain them; **0** with no fault near.",
		"| restart-empty | 1 | 100ms |",
		"| sigstop | 1 | 100ms |",
		"| 0 | 0 | 7 | 1000 | 2000 |",
		"## With the protection off",
		"C2 **1 violations**, C3 none",
		"## What is not guaranteed",
		"A majority of the nodes losing data at once",
		"counted, not judged | 1 violations; 0 model checks |",
		"steps one node's clock 700ms ahead (58 times the",
		"| force-release | 0 | 0 | 0 |  |",
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

func TestUnavailableTellsFaultsFromBusyness(t *testing.T) {
	at := func(invoke, complete int) Event {
		return Event{Op: OpAcquire, Resource: "r", Status: 503, Outcome: Fail, Invoke: ms(invoke), Complete: ms(complete)}
	}
	faults := []Fault{
		{Kind: kindStop, Start: ms(1000), End: ms(2000), Nodes: []int{1}},
		{Kind: kindEmpty, Start: ms(10000), End: ms(11000), Nodes: []int{0}, DataLoss: true},
		{Kind: kindGwPause, Start: ms(20000), End: ms(21000), Gateways: []int{2}},
		{Kind: kindClientPause, Start: ms(30000), End: ms(31000)},
	}
	tests := []struct {
		name      string
		e         Event
		explained bool
	}{
		{"during a node fault", at(1500, 1510), true},
		{"begun before a node fault, answered in it", at(990, 1001), true},
		{"within the bound after the heal", at(2900, 2950), true},
		{"past the bound after the heal", at(3100, 3150), false},
		{"within the loss bound after a data loss", at(15000, 15010), true},
		{"past the loss bound", at(16100, 16110), false},
		{"during a gateway pause", at(20500, 20510), true},
		{"during a client's pause only", at(30500, 30510), false},
		{"long before any fault", at(100, 110), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Summary{Bound: time.Second, LossBound: 5 * time.Second, Faults: faults,
				Events: []Event{tc.e, {Op: OpAcquire, Status: 201, Outcome: Ok, Invoke: ms(100), Complete: ms(110)}}}
			explained, unexplained := s.Unavailable()
			if got := explained == 1; got != tc.explained || explained+len(unexplained) != 1 {
				t.Errorf("explained %d, unexplained %d; want the 503 explained: %v", explained, len(unexplained), tc.explained)
			}
		})
	}
}

func TestNearStallCountsCallsInTheStallsSecond(t *testing.T) {
	s := &Summary{Stalls: []Stall{{Node: 2, Event: "aof-fsync-always", At: ms(29000), Took: 46 * time.Millisecond}}}
	tests := []struct {
		invoke int
		near   bool
	}{{27900, false}, {28000, true}, {29500, true}, {30999, true}, {31000, false}}
	for _, tc := range tests {
		e := Event{Op: OpAcquire, Status: 503, Invoke: ms(tc.invoke)}
		if got := s.NearStall([]Event{e}) == 1; got != tc.near {
			t.Errorf("a 503 sent at %d ms: near the stall at 29 s = %v, want %v", tc.invoke, got, tc.near)
		}
	}
}

// TestWithKept: a long run's report keeps RELIABILITY.md's hand-written
// part, from KeptMarker on, and nothing above it.
func TestWithKept(t *testing.T) {
	for _, tc := range []struct {
		name, old, want string
	}{
		{"no file before", "", "# run\n"},
		{"a file without the marker", "# old run\n", "# run\n"},
		{"a file with the marker", "# old run\n\n" + KeptMarker + "\n## Bugs\n", "# run\n\n" + KeptMarker + "\n## Bugs\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WithKept("# run\n", []byte(tc.old)); got != tc.want {
				t.Errorf("WithKept = %q, want %q", got, tc.want)
			}
		})
	}
}
