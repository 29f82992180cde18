package quorum

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		v    view
		want step
	}{
		{"rule 1: an undecided call reads the next answer",
			view{phase: open}, read},
		{"rule 1: a call whose policy holds begins its grace",
			view{phase: open, holds: true}, begin},
		{"a complete call stops, decided or not",
			view{phase: open, complete: true}, stop},
		{"a complete call stops in its grace",
			view{phase: grace, complete: true, waiting: true, now: at(1), graceEnd: at(5)}, stop},
		{"rule 3: the grace waits for a node still to answer",
			view{phase: grace, waiting: true, now: at(1), graceEnd: at(5)}, await},
		{"rule 3: nobody to wait for (every node still to answer is behind): stop",
			view{phase: grace, now: at(1), graceEnd: at(5)}, stop},
		{"rule 4: the grace ended: expire",
			view{phase: grace, waiting: true, now: at(5), graceEnd: at(5)}, expire},
		{"rule 4: past its end too",
			view{phase: grace, waiting: true, now: at(9), graceEnd: at(5)}, expire},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.v); got != tt.want {
				t.Fatalf("decide(%+v) = %v, want %v", tt.v, got, tt.want)
			}
		})
	}
}

func TestGraceFrom(t *testing.T) {
	tests := []struct {
		name      string
		began, at time.Time
		least     time.Duration
		want      time.Time
	}{
		{"as long as the call had taken", at(0), at(10), time.Millisecond, at(20)},
		{"at least least", at(0), at(1), 5 * time.Millisecond, at(6)},
	}
	for _, tt := range tests {
		if got := graceFrom(tt.began, tt.at, tt.least); !got.Equal(tt.want) {
			t.Errorf("%s: graceFrom = %v, want %v", tt.name, got.Sub(t0), tt.want.Sub(t0))
		}
	}
}

// timedAnswer is an answer of TestTiming: when it came (ms), whether it
// failed, and what the call should make of it.
type timedAnswer struct {
	at     int
	failed bool
	inTime bool
	end    int // the grace's end then (ms); -1: no grace yet
}

// hearAll feeds answers to a call over 3 nodes (quorum 2) that began at 0,
// least grace 1 ms, and checks each.
func hearAll(t *testing.T, answers []timedAnswer) {
	t.Helper()
	tm := timing{began: t0}
	for k, a := range answers {
		var inTime bool
		tm, inTime = tm.hear(at(a.at), a.failed, 2, time.Millisecond)
		end := -1
		if !tm.end.IsZero() {
			end = int(tm.end.Sub(t0) / time.Millisecond)
		}
		if inTime != a.inTime || end != a.end {
			t.Fatalf("answer %d at %d ms: in time %v, grace end %d; want %v, %d", k, a.at, inTime, end, a.inTime, a.end)
		}
	}
}

// Rule 2 and the in-time half of rule 5, answer by answer.
func TestTiming(t *testing.T) {
	tests := []struct {
		name    string
		answers []timedAnswer
	}{
		{"the quorum-th answer sets the grace", []timedAnswer{
			{at: 2, inTime: true, end: -1},
			{at: 10, inTime: true, end: 20},
			{at: 20, inTime: true, end: 20},
		}},
		{"an answer after the grace is late", []timedAnswer{
			{at: 2, inTime: true, end: -1},
			{at: 10, inTime: true, end: 20},
			{at: 21, inTime: false, end: 20},
		}},
		{"a failure does not count towards the quorum", []timedAnswer{
			{at: 1, failed: true, inTime: true, end: -1},
			{at: 2, inTime: true, end: -1},
			{at: 30, inTime: true, end: 60},
		}},
		{"a failure after the grace is late too", []timedAnswer{
			{at: 2, inTime: true, end: -1},
			{at: 3, inTime: true, end: 6},
			{at: 7, failed: true, inTime: false, end: 6},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { hearAll(t, tt.answers) })
	}
	t.Run("the grace begun at the decision extends an earlier one", func(t *testing.T) {
		tm := timing{began: t0, end: at(4)}
		if got := tm.decided(at(10), time.Millisecond).end; !got.Equal(at(20)) {
			t.Fatalf("grace end %v, want 20ms", got.Sub(t0))
		}
	})
	t.Run("and never shortens it", func(t *testing.T) {
		tm := timing{began: t0, end: at(40)}
		if got := tm.decided(at(10), time.Millisecond).end; !got.Equal(at(40)) {
			t.Fatalf("grace end %v, want 40ms", got.Sub(t0))
		}
	})
	t.Run("a decision sets a grace where no quorum answered", func(t *testing.T) {
		tm := timing{began: t0}
		if got := tm.decided(at(10), time.Millisecond).end; !got.Equal(at(20)) {
			t.Fatalf("grace end %v, want 20ms", got.Sub(t0))
		}
	})
}

// Rule 5 for the answers that come after the call returned.
func TestJudgeLate(t *testing.T) {
	tests := []struct {
		name           string
		at, graceEnd   time.Time
		ranOut         bool
		judged, inTime bool
	}{
		{"within the grace: in time", at(5), at(10), false, true, true},
		{"within the grace, though it expired: it was waiting to be read", at(5), at(10), true, true, true},
		{"after the grace of a call that did not wait for it: late", at(15), at(10), false, true, false},
		{"after an expiry that judged it late already: not again", at(15), at(10), true, false, false},
		{"a call with no grace judges nothing", at(15), time.Time{}, false, false, false},
	}
	for _, tt := range tests {
		if judged, inTime := judgeLate(tt.at, tt.graceEnd, tt.ranOut); judged != tt.judged || inTime != tt.inTime {
			t.Errorf("%s: judged %v, in time %v; want %v, %v", tt.name, judged, inTime, tt.judged, tt.inTime)
		}
	}
}

// Rule 6, judgement by judgement.
func TestPaceState(t *testing.T) {
	type judgement struct {
		seq    uint64
		inTime bool
		missed int
		behind bool
	}
	tests := []struct {
		name string
		js   []judgement
	}{
		{"behind after two misses in a row", []judgement{
			{1, false, 1, false}, {2, false, 2, true},
		}},
		{"an answer in time ends it", []judgement{
			{1, false, 1, false}, {2, false, 2, true}, {3, true, 0, false},
		}},
		{"a miss between answers in time is no row", []judgement{
			{1, false, 1, false}, {2, true, 0, false}, {3, false, 1, false},
		}},
		{"misses count up to 3", []judgement{
			{1, false, 1, false}, {2, false, 2, true}, {3, false, 3, true}, {4, false, 3, true},
		}},
		{"an older call's judgement is ignored", []judgement{
			{1, false, 1, false}, {2, false, 2, true}, {4, true, 0, false}, {3, false, 0, false},
		}},
		{"the same call may be judged again", []judgement{
			{5, false, 1, false}, {5, true, 0, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s paceState
			for _, j := range tt.js {
				s, _ = s.judged(j.seq, j.inTime)
				if s.missed() != j.missed || s.behind() != j.behind {
					t.Fatalf("after call %d judged in time %v: missed %d, behind %v; want %d, %v", j.seq, j.inTime, s.missed(), s.behind(), j.missed, j.behind)
				}
			}
		})
	}
}
