package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// acq is an acquire sent at from (ms) that answered at to with token and a
// validity of valid ms.
func acq(res, lease string, token uint64, from, to, valid int) Event {
	return Event{Op: OpAcquire, Resource: res, Lease: lease, Token: token, Status: 201, Outcome: Ok,
		Invoke: ms(from), Complete: ms(to), ValidFor: ms(valid)}
}

func rel(res, lease string, from, to int, out Outcome) Event {
	st := 204
	if out != Ok {
		st = 0
	}
	return Event{Op: OpRelease, Resource: res, Lease: lease, Outcome: out, Status: st, Invoke: ms(from), Complete: ms(to)}
}

func ext(res, lease string, token uint64, from, to, valid int) Event {
	return Event{Op: OpExtend, Resource: res, Lease: lease, Token: token, Status: 200, Outcome: Ok,
		Invoke: ms(from), Complete: ms(to), ValidFor: ms(valid)}
}

func foreign(op Op, res, lease string, from, to int, never bool) Event {
	st := 200
	if op == OpRelease {
		st = 204
	}
	return Event{Op: op, Resource: res, Lease: lease, Outcome: Ok, Status: st, Invoke: ms(from), Complete: ms(to),
		Foreign: true, NeverGranted: never}
}

// force is a force release of res sent at from (ms) that answered status
// at to (0: no answer, Unknown).
func force(res string, from, to, status int) Event {
	e := Event{Op: OpForceRelease, Resource: res, Status: status, Invoke: ms(from), Complete: ms(to)}
	switch {
	case status == 0:
		e.Outcome = Unknown
	case status/100 == 2:
		e.Outcome = Ok
	default:
		e.Outcome = Fail
	}
	return e
}

func wantViolations(t *testing.T, got []Violation, want int, contains string) {
	t.Helper()
	if len(got) != want {
		t.Fatalf("got %d violations, want %d: %v", len(got), want, got)
	}
	for _, v := range got {
		if !strings.Contains(v.String(), contains) {
			t.Errorf("violation %q does not mention %q", v, contains)
		}
	}
}

func TestCheckC1(t *testing.T) {
	overlap := []Event{
		acq("r", "L1", 1, 0, 10, 1000),
		acq("r", "L2", 2, 500, 510, 1000), // L1 holds until 1000
		rel("r", "L1", 900, 910, Ok),
	}
	tests := []struct {
		name    string
		events  []Event
		faults  []Fault
		want    int
		excused int
	}{
		{"hand-over after release", []Event{
			acq("r", "L1", 1, 0, 10, 1000), rel("r", "L1", 100, 110, Ok), acq("r", "L2", 2, 120, 130, 1000)}, nil, 0, 0},
		{"hand-over after expiry", []Event{
			acq("r", "L1", 1, 0, 10, 1000), acq("r", "L2", 2, 990, 1005, 1000)}, nil, 0, 0},
		{"overlap in a fault-free window", overlap, nil, 1, 0},
		{"overlap inside a fault window is excused", overlap,
			[]Fault{{Kind: "restart-empty", Start: ms(400), End: ms(450)}}, 0, 1},
		{"an extension keeps the first holder", []Event{
			acq("r", "L1", 1, 0, 10, 1000), ext("r", "L1", 1, 900, 910, 1000), acq("r", "L2", 2, 1200, 1210, 1000)}, nil, 1, 0},
		{"other resources never overlap", []Event{
			acq("r", "L1", 1, 0, 10, 1000), acq("s", "L2", 1, 5, 15, 1000)}, nil, 0, 0},
		{"a force release ends the holding", []Event{
			acq("r", "L1", 1, 0, 10, 1000), force("r", 400, 410, 204), acq("r", "L2", 2, 500, 510, 1000)}, nil, 0, 0},
		{"a force release answered 503 may have ended it", []Event{
			acq("r", "L1", 1, 0, 10, 1000), force("r", 400, 410, 503), acq("r", "L2", 2, 500, 510, 1000)}, nil, 0, 0},
		{"an unanswered force release may have ended it", []Event{
			acq("r", "L1", 1, 0, 10, 1000), force("r", 400, 2000, 0), acq("r", "L2", 2, 500, 510, 1000)}, nil, 0, 0},
		{"a force release answered 404 ended nothing", []Event{
			acq("r", "L1", 1, 0, 10, 1000), force("r", 400, 410, 404), acq("r", "L2", 2, 500, 510, 1000)}, nil, 1, 0},
		{"a force release before the grant ended nothing", []Event{
			force("r", 0, 5, 204), acq("r", "L1", 1, 10, 20, 1000), acq("r", "L2", 2, 500, 510, 1000)}, nil, 1, 0},
		{"a force release of another resource ended nothing", []Event{
			acq("r", "L1", 1, 0, 10, 1000), force("s", 400, 410, 204), acq("r", "L2", 2, 500, 510, 1000)}, nil, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, excused := CheckC1(tc.events, tc.faults, ms(100))
			wantViolations(t, v, tc.want, "C1")
			if excused != tc.excused {
				t.Errorf("excused %d, want %d", excused, tc.excused)
			}
		})
	}
}

func TestCheckC2(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   int
	}{
		{"rising tokens", []Event{
			acq("r", "L1", 1, 0, 10, 1000), rel("r", "L1", 20, 30, Ok), acq("r", "L2", 2, 40, 50, 1000)}, 0},
		{"lower token after a release (lagging node, then an empty one)", []Event{
			acq("r", "L1", 9, 0, 10, 1000), rel("r", "L1", 20, 30, Ok), acq("r", "L2", 5, 40, 50, 1000)}, 1},
		{"lower token after the holder's validity ran out", []Event{
			acq("r", "L1", 9, 0, 10, 100), acq("r", "L2", 5, 200, 210, 1000)}, 1},
		{"same token for two leases while the first is live (empty restart under a holder)", []Event{
			acq("r", "L1", 4, 0, 10, 1000), acq("r", "L2", 4, 300, 310, 1000)}, 1},
		{"lower token from concurrent acquires is not an order violation", []Event{
			acq("r", "L1", 9, 0, 10, 1000), acq("r", "L2", 5, 5, 20, 1000)}, 0},
		{"a release whose answer was lost does not end the grant early", []Event{
			acq("r", "L1", 9, 0, 10, 1000), rel("r", "L1", 20, 30, Unknown), acq("r", "L2", 5, 40, 50, 1000)}, 0},
		// L1's gateway was paused mid-request: it may have acquired just
		// before answering, so its lock may live until 1900+1000, and L2
		// (sent at 1200) may have come first.
		{"a grant answered late may have begun late", []Event{
			acq("r", "L1", 9, 0, 1900, 1000), acq("r", "L2", 5, 1200, 1210, 1000)}, 0},
		{"a grant answered late still ends", []Event{
			acq("r", "L1", 9, 0, 1900, 1000), acq("r", "L2", 5, 3000, 3010, 1000)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantViolations(t, CheckC2(tc.events), tc.want, "C2")
		})
	}
}

func TestCheckC3(t *testing.T) {
	w := func(res, lease string, tok uint64, value string, admitted bool) Admission {
		return Admission{Resource: res, Lease: lease, Token: tok, Value: value, Admitted: admitted}
	}
	ack := func(res, lease string, tok uint64, value string) Event {
		return Event{Op: OpWrite, Resource: res, Lease: lease, Token: tok, Value: value, Outcome: Ok}
	}
	tests := []struct {
		name    string
		events  []Event
		log     []Admission
		finals  map[string]string
		want    int
		refused int
	}{
		{"in order with a refusal", []Event{ack("r", "L1", 1, "a"), ack("r", "L2", 2, "b")},
			[]Admission{w("r", "L1", 1, "a", true), w("r", "L2", 2, "b", true), w("r", "L1", 1, "c", false)},
			map[string]string{"r": "b"}, 0, 1},
		{"lower token admitted after a higher one", nil,
			[]Admission{w("r", "L1", 2, "a", true), w("r", "L2", 1, "b", true)}, map[string]string{"r": "b"}, 1, 0},
		{"one token admitted for two leases (L1, L2, L1)", nil,
			[]Admission{w("r", "L1", 4, "a", true), w("r", "L2", 4, "b", true), w("r", "L1", 4, "c", true)},
			map[string]string{"r": "c"}, 2, 0},
		{"an acknowledged write that was never admitted", []Event{ack("r", "L1", 3, "x")},
			[]Admission{w("r", "L1", 1, "a", true)}, map[string]string{"r": "a"}, 1, 0},
		{"the final value is not the last admitted write", nil,
			[]Admission{w("r", "L1", 1, "a", true), w("r", "L2", 2, "b", true)}, map[string]string{"r": "a"}, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, refused := CheckC3(tc.events, tc.log, tc.finals)
			wantViolations(t, v, tc.want, "C3")
			if refused != tc.refused {
				t.Errorf("refused %d, want %d", refused, tc.refused)
			}
		})
	}
}

func TestCheckC4(t *testing.T) {
	refused := func(at int) Event {
		return Event{Op: OpAcquire, Resource: "c", Lease: fmt.Sprint("R", at), Status: 503, Outcome: Fail, Invoke: ms(at), Complete: ms(at + 50)}
	}
	fault := Fault{Kind: "sigstop", Target: "node 2", Start: ms(1000), End: ms(2000)}
	tests := []struct {
		name     string
		events   []Event
		want     int
		recovery time.Duration
		longest  time.Duration
	}{
		{"recovers at once", []Event{acq("a", "L1", 1, 900, 950, 1000), acq("b", "L2", 1, 2010, 2030, 1000)}, 0, ms(30), ms(1080)},
		{"recovers too late", []Event{acq("a", "L1", 1, 900, 950, 1000), refused(2500), acq("b", "L2", 1, 5500, 5600, 1000)}, 1, ms(3600), ms(4650)},
		{"never recovers", []Event{acq("a", "L1", 1, 900, 950, 1000), refused(2100), refused(4000)}, 1, -1, ms(9050)},
		{"nobody tried after the heal: not judged", []Event{acq("a", "L1", 1, 900, 950, 1000)}, 0, -1, ms(9050)},
		{"an acquire sent before the heal does not count", []Event{acq("b", "L2", 1, 1990, 2100, 1000), refused(3000)}, 1, -1, ms(7900)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, gaps := CheckC4(tc.events, []Fault{fault}, ms(3000), ms(3000), ms(10000))
			wantViolations(t, v, tc.want, "C4")
			if len(gaps) != 1 || gaps[0].Recovery != tc.recovery || gaps[0].Longest != tc.longest {
				t.Errorf("gaps %+v, want recovery %v longest %v", gaps, tc.recovery, tc.longest)
			}
		})
	}
	t.Run("a fault that healed too close to the end is not judged", func(t *testing.T) {
		v, _ := CheckC4(nil, []Fault{fault}, ms(3000), ms(3000), ms(4000))
		wantViolations(t, v, 0, "C4")
	})
	t.Run("after a data loss the quarantine is allowed, and no more", func(t *testing.T) {
		loss := fault
		loss.DataLoss = true
		late := []Event{acq("a", "L1", 1, 900, 950, 1000), refused(2500), acq("b", "L2", 1, 5500, 5600, 1000)}
		v, _ := CheckC4(late, []Fault{loss}, ms(3000), ms(6000), ms(10000))
		wantViolations(t, v, 0, "C4")
		v, _ = CheckC4(late, []Fault{loss}, ms(3000), ms(3500), ms(10000))
		wantViolations(t, v, 1, "C4")
	})
}

func TestCheckC5(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   int
	}{
		{"stale lease refused leaves nothing to report", []Event{
			acq("r", "L1", 1, 0, 10, 1000), rel("r", "L1", 20, 30, Ok),
			{Op: OpExtend, Resource: "r", Lease: "L1", Outcome: Fail, Status: 404, Invoke: ms(40), Complete: ms(50), Foreign: true}}, 0},
		{"a never-granted lease released the lock", []Event{
			acq("r", "L1", 1, 0, 10, 1000), foreign(OpRelease, "r", "X", 40, 50, true)}, 1},
		{"a released lease extended again", []Event{
			acq("r", "L1", 1, 0, 10, 1000), rel("r", "L1", 20, 30, Ok), foreign(OpExtend, "r", "L1", 40, 50, false)}, 1},
		{"a stale lease released the next holder's lock", []Event{
			acq("r", "L1", 1, 0, 10, 100), acq("r", "L2", 2, 200, 210, 1000), foreign(OpRelease, "r", "L1", 300, 310, false)}, 1},
		{"a lease whose release answer was lost may still release its own lock", []Event{
			acq("r", "L1", 1, 0, 10, 1000), rel("r", "L1", 20, 30, Unknown), foreign(OpRelease, "r", "L1", 40, 50, false)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantViolations(t, CheckC5(tc.events), tc.want, "C5")
		})
	}
}

func TestCheckAnswers(t *testing.T) {
	reentered := acq("r", "L1", 1, 0, 10, 1000)
	reentered.Status = 200
	notHeld := rel("r", "L1", 100, 110, Fail)
	notHeld.Status = 404
	// notHeldAt is notHeld answered at ms: held up by a paused gateway.
	notHeldAt := func(at int) Event {
		e := notHeld
		e.Complete = ms(at)
		return e
	}
	tests := []struct {
		name   string
		events []Event
		faults []Fault
		want   int
	}{
		{"201 then a retry's 200", []Event{acq("r", "L1", 1, 0, 10, 1000), func() Event {
			e := acq("r", "L1", 1, 20, 30, 1000)
			e.Status = 200
			return e
		}()}, nil, 0},
		{"a first acquire answered 200 (a lost reply re-ran the script)", []Event{reentered}, nil, 1},
		{"a release while valid answered 404", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeld}, nil, 1},
		{"a release after the validity answered 404", []Event{acq("r", "L1", 1, 0, 10, 50), notHeld}, nil, 0},
		{"a node lost its data during the grant", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeld},
			[]Fault{{Kind: kindEmpty, Start: ms(50), End: ms(60), DataLoss: true}}, 0},
		{"its gateway was paused past the validity", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeldAt(1210)},
			[]Fault{{Kind: kindGwPause, Start: ms(90), End: ms(1200), Gateways: []int{0}}}, 0},
		{"its gateway resumed in time", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeldAt(910)},
			[]Fault{{Kind: kindGwPause, Start: ms(90), End: ms(900), Gateways: []int{0}}}, 1},
		{"another gateway was paused", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeldAt(1210)},
			[]Fault{{Kind: kindGwPause, Start: ms(90), End: ms(1200), Gateways: []int{1}}}, 1},
		{"its gateway was paused before the release was sent", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeld},
			[]Fault{{Kind: kindGwPause, Start: ms(20), End: ms(80), Gateways: []int{0}}}, 1},
		{"a force release broke the lock first", []Event{acq("r", "L1", 1, 0, 10, 1000), force("r", 50, 60, 204), notHeld}, nil, 0},
		{"a force release concurrent with the release", []Event{acq("r", "L1", 1, 0, 10, 1000), force("r", 105, 130, 204), notHeld}, nil, 0},
		{"a force release after the release's answer", []Event{acq("r", "L1", 1, 0, 10, 1000), notHeld, force("r", 120, 130, 204)}, nil, 1},
		{"a force release that found nothing", []Event{acq("r", "L1", 1, 0, 10, 1000), force("r", 50, 60, 404), notHeld}, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantViolations(t, CheckAnswers(tc.events, tc.faults), tc.want, "A ")
		})
	}
}

// TestOutsideTheModelIsCountedApart: a grant beside a live holder is a
// violation (C2's token order holds, the mutex model rejects it), unless it
// lies in the window of a fault outside the model, where it is counted apart
// and the history is accepted with rule M7; a violation elsewhere still
// fails.
func TestOutsideTheModelIsCountedApart(t *testing.T) {
	events := []Event{acq("r", "L1", 1, 0, 10, 1000), acq("r", "L2", 2, 200, 210, 1000)}
	step := Fault{Kind: kindClockStep, Start: ms(150), End: ms(160), Nodes: []int{0}, Outside: true}
	drift := Fault{Kind: kindClockDrift, Start: ms(150), End: ms(160), Nodes: []int{0}}
	for _, tc := range []struct {
		name        string
		faults      []Fault
		wantVerdict string
		wantOutside int
	}{
		{"no fault", nil, "Illegal", 0},
		{"a fault within the model", []Fault{drift}, "Illegal", 0},
		{"a clock step past the allowance", []Fault{step}, "Ok", 1},
		{"a clock step long after", []Fault{{Kind: kindClockStep, Start: ms(5000), End: ms(5010), Outside: true}}, "Illegal", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, outside := CheckModelsOutside(events, 0, Outside(tc.faults, ms(100)))
			if len(res) != 1 || string(res[0].Verdict) != tc.wantVerdict || len(outside) != tc.wantOutside {
				t.Fatalf("results %v, outside the model %v; want the mutex %s and %d outside", res, outside, tc.wantVerdict, tc.wantOutside)
			}
			if tc.wantOutside > 0 && outside[0].Verdict != "Illegal" {
				t.Errorf("outside the model: %v, want the strict check's rejection", outside[0])
			}
		})
	}
	v := []Violation{{Check: "C2", At: ms(200)}, {Check: "C2", At: ms(3000)}}
	inside, out := SplitOutside(v, Outside([]Fault{step, drift}, ms(100)))
	if len(inside) != 1 || inside[0].At != ms(3000) || len(out) != 1 || out[0].At != ms(200) {
		t.Errorf("SplitOutside: inside %v, outside %v", inside, out)
	}
}
