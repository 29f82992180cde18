package model

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// op builds an Ok operation from invoke to complete (milliseconds).
func op(client int, k Kind, lease string, from, to int, tok uint64, valid int) Op {
	return Op{Client: client, Kind: k, Key: "r", Lease: lease, Invoke: ms(from), Complete: ms(to),
		Token: tok, Valid: ms(valid)}
}

func unknown(o Op) Op       { o.Outcome = Unknown; return o }
func maybe(o Op) Op         { o.Outcome = Maybe; return o }
func failed(o Op) Op        { o.Outcome = Fail; return o }
func permit(o Op, p int) Op { o.Permit = p; return o }
func key(o Op, k string) Op { o.Key = k; return o }
func outside(o Op) Op       { o.Outside = true; return o }

func check(t *testing.T, m porcupine.Model, ops []Op, keepFailures bool, want porcupine.CheckResult) {
	t.Helper()
	r := Check("test", m, History(ops, keepFailures), 10*time.Second)
	if r.Verdict != want {
		path := filepath.Join(t.TempDir(), "history.html")
		if err := r.Visualize(path); err != nil {
			t.Error(err)
		}
		t.Fatalf("%v, want %s (history viewer: %s)", r, want, path)
	}
}

// TestMutex: hand-made histories of one or two resources that the fenced
// mutex must accept (Ok) or reject (Illegal).
func TestMutex(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"one holder acquires, extends and releases", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(0, Extend, "a", 500, 510, 1, 1000), op(0, Release, "a", 600, 610, 0, 0),
		}, porcupine.Ok},
		{"a second holder after the first released", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(0, Release, "a", 100, 110, 0, 0), op(1, Acquire, "b", 120, 130, 2, 1000),
		}, porcupine.Ok},
		{"a second holder after the first's validity ran out", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(1, Acquire, "b", 900, 1100, 2, 1000),
		}, porcupine.Ok},
		{"two overlapping holders", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(1, Acquire, "b", 200, 210, 2, 1000),
		}, porcupine.Illegal},
		{"an extend keeps the second holder out", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(0, Extend, "a", 800, 810, 1, 1000), op(1, Acquire, "b", 1200, 1210, 2, 1000),
		}, porcupine.Illegal},
		{"concurrent acquires ordered either way", []Op{
			op(0, Acquire, "a", 0, 100, 2, 50), op(1, Acquire, "b", 10, 110, 1, 40),
		}, porcupine.Ok},
		{"a token going back", []Op{
			op(0, Acquire, "a", 0, 10, 5, 100), op(0, Release, "a", 20, 30, 0, 0), op(1, Acquire, "b", 40, 50, 4, 100),
		}, porcupine.Illegal},
		{"one token for two leases", []Op{
			op(0, Acquire, "a", 0, 10, 5, 100), op(1, Acquire, "b", 200, 210, 5, 100),
		}, porcupine.Illegal},
		{"a retried acquire of the holder's lease keeps its token", []Op{
			op(0, Acquire, "a", 0, 10, 5, 1000), op(0, Acquire, "a", 20, 30, 5, 1000),
		}, porcupine.Ok},
		{"a stale lease's extend after another's grant", []Op{
			op(0, Acquire, "a", 0, 10, 1, 100), op(1, Acquire, "b", 200, 210, 2, 1000), op(0, Extend, "a", 300, 310, 2, 1000),
		}, porcupine.Illegal},
		{"a release after its own acknowledged release", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(0, Release, "a", 20, 30, 0, 0), op(0, Release, "a", 40, 50, 0, 0),
		}, porcupine.Illegal},
		{"the holder extends after its validity with no one else granted", []Op{
			op(0, Acquire, "a", 0, 10, 1, 100), op(0, Extend, "a", 105, 115, 1, 100),
		}, porcupine.Ok},
		{"an unknown acquire that granted, released later by its lease", []Op{
			unknown(op(0, Acquire, "a", 0, 0, 0, 0)), op(0, Release, "a", 2000, 2010, 0, 0), op(1, Acquire, "b", 2020, 2030, 2, 1000),
		}, porcupine.Ok},
		{"an unknown acquire's grant took a token", []Op{
			unknown(op(0, Acquire, "a", 0, 0, 0, 0)), op(0, Release, "a", 2000, 2010, 0, 0), op(1, Acquire, "b", 2020, 2030, 1, 1000),
		}, porcupine.Illegal},
		{"an unknown acquire that took a token: a later one must be higher", []Op{
			op(0, Acquire, "a", 0, 10, 1, 100), unknown(op(1, Acquire, "u", 200, 0, 0, 0)), op(1, Extend, "u", 300, 310, 2, 100),
			op(2, Acquire, "b", 1000, 1010, 2, 100),
		}, porcupine.Illegal},
		{"an unknown release let the next holder in", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), unknown(op(0, Release, "a", 20, 0, 0, 0)), op(1, Acquire, "b", 100, 110, 2, 1000),
		}, porcupine.Ok},
		{"a failed release may have let the next holder in", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), maybe(op(0, Release, "a", 20, 30, 0, 0)), op(1, Acquire, "b", 100, 110, 2, 1000),
		}, porcupine.Ok},
		{"a failed release acts before its answer", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), maybe(op(0, Release, "a", 500, 510, 0, 0)), op(1, Acquire, "b", 100, 110, 2, 1000),
		}, porcupine.Illegal},
		{"an unknown extend promises nothing", []Op{
			op(0, Acquire, "a", 0, 10, 1, 100), unknown(op(0, Extend, "a", 50, 0, 0, 0)), op(1, Acquire, "b", 150, 160, 2, 1000),
		}, porcupine.Ok},
		{"a failed acquire changes nothing", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), failed(op(1, Acquire, "b", 100, 110, 0, 0)), op(0, Release, "a", 200, 210, 0, 0),
		}, porcupine.Ok},
		{"a force release lets the next holder in, with a higher token", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(2, ForceRelease, "", 100, 110, 0, 0), op(1, Acquire, "b", 120, 130, 2, 1000),
		}, porcupine.Ok},
		// M6: a force release ends the holder's lease at its moment, once.
		{"a force release ends the holder's validity early", []Op{
			op(0, Acquire, "a", 0, 10, 1, 10000), op(2, ForceRelease, "", 100, 110, 0, 0), op(1, Acquire, "b", 120, 130, 2, 10000),
			op(2, ForceRelease, "", 200, 210, 0, 0), op(0, Acquire, "c", 220, 230, 3, 10000),
		}, porcupine.Ok},
		{"a force release does not free a lock granted after it", []Op{
			op(2, ForceRelease, "", 0, 10, 0, 0), op(0, Acquire, "a", 20, 30, 1, 1000), op(1, Acquire, "b", 100, 110, 2, 1000),
		}, porcupine.Illegal},
		{"one force release does not break two holders", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(2, ForceRelease, "", 100, 110, 0, 0), op(1, Acquire, "b", 120, 130, 2, 1000),
			op(3, Acquire, "c", 200, 210, 3, 1000),
		}, porcupine.Illegal},
		{"a force release of another resource frees nothing here", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), key(op(2, ForceRelease, "", 100, 110, 0, 0), "s"), op(1, Acquire, "b", 120, 130, 2, 1000),
		}, porcupine.Illegal},
		{"the next holder after a force release repeats the broken token", []Op{
			op(0, Acquire, "a", 0, 10, 5, 1000), op(2, ForceRelease, "", 100, 110, 0, 0), op(1, Acquire, "b", 120, 130, 5, 1000),
		}, porcupine.Illegal},
		{"the broken holder extends after the force release", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(2, ForceRelease, "", 100, 110, 0, 0), op(0, Extend, "a", 200, 210, 1, 1000),
		}, porcupine.Illegal},
		{"the broken holder's release after the force release answered 404", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(2, ForceRelease, "", 100, 110, 0, 0), maybe(op(0, Release, "a", 200, 210, 0, 0)),
			op(1, Acquire, "b", 220, 230, 2, 1000),
		}, porcupine.Ok},
		{"an extend concurrent with a force release is ordered before it", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), op(0, Extend, "a", 100, 200, 1, 1000), op(2, ForceRelease, "", 150, 160, 0, 0),
			op(1, Acquire, "b", 300, 310, 2, 1000),
		}, porcupine.Ok},
		{"a force release answered 503 may have freed the lock", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), maybe(op(2, ForceRelease, "", 100, 110, 0, 0)), op(1, Acquire, "b", 120, 130, 2, 1000),
		}, porcupine.Ok},
		{"a force release answered 503 acts before its answer", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), maybe(op(2, ForceRelease, "", 500, 510, 0, 0)), op(1, Acquire, "b", 100, 110, 2, 1000),
		}, porcupine.Illegal},
		{"an unanswered force release may land long after it was sent", []Op{
			op(0, Acquire, "a", 0, 10, 1, 5000), unknown(op(2, ForceRelease, "", 20, 0, 0, 0)), op(1, Acquire, "b", 3000, 3010, 2, 1000),
		}, porcupine.Ok},
		{"an unanswered force release breaks at most one holder", []Op{
			op(0, Acquire, "a", 0, 10, 1, 5000), unknown(op(2, ForceRelease, "", 20, 0, 0, 0)), op(1, Acquire, "b", 3000, 3010, 2, 5000),
			op(3, Acquire, "c", 4000, 4010, 3, 1000),
		}, porcupine.Illegal},
		{"a force release of a free lock", []Op{
			op(2, ForceRelease, "", 0, 10, 0, 0), op(0, Acquire, "a", 20, 30, 1, 1000),
		}, porcupine.Ok},
		// M7: an acquire outside the model is not held to the holder's end.
		{"a grant beside a live holder, outside the model", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), outside(op(1, Acquire, "b", 200, 210, 2, 1000)),
		}, porcupine.Ok},
		{"a grant outside the model still carries a higher token", []Op{
			op(0, Acquire, "a", 0, 10, 2, 1000), outside(op(1, Acquire, "b", 200, 210, 2, 1000)),
		}, porcupine.Illegal},
		{"a grant after one outside the model is held to its end", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), outside(op(1, Acquire, "b", 200, 210, 2, 1000)),
			op(2, Acquire, "c", 400, 410, 3, 1000),
		}, porcupine.Illegal},
		{"an unanswered grant outside the model", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), outside(unknown(op(1, Acquire, "u", 200, 0, 0, 0))),
			op(1, Extend, "u", 300, 310, 2, 1000),
		}, porcupine.Ok},
		{"resources are apart", []Op{
			op(0, Acquire, "a", 0, 10, 1, 1000), key(op(1, Acquire, "b", 100, 110, 1, 1000), "s"),
		}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, Mutex, tc.ops, false, tc.want) })
	}
}

// TestSemaphore: the fenced semaphore of 2 permits.
func TestSemaphore(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"two holders on two permits", []Op{
			permit(op(0, Acquire, "a", 0, 10, 1, 1000), 0), permit(op(1, Acquire, "b", 5, 15, 1, 1000), 1),
			permit(op(0, Release, "a", 100, 110, 0, 0), 0), permit(op(2, Acquire, "c", 120, 130, 2, 1000), 0),
		}, porcupine.Ok},
		{"a third permit", []Op{
			permit(op(0, Acquire, "a", 0, 10, 1, 1000), 2),
		}, porcupine.Illegal},
		{"one permit held twice", []Op{
			permit(op(0, Acquire, "a", 0, 10, 1, 1000), 0), permit(op(1, Acquire, "b", 100, 110, 2, 1000), 0),
		}, porcupine.Illegal},
		{"a permit's token going back", []Op{
			permit(op(0, Acquire, "a", 0, 10, 3, 100), 1), permit(op(1, Acquire, "b", 200, 210, 2, 100), 1),
		}, porcupine.Illegal},
		{"an extend on another's permit", []Op{
			permit(op(0, Acquire, "a", 0, 10, 1, 1000), 0), permit(op(1, Extend, "a", 20, 30, 1, 1000), 1),
		}, porcupine.Illegal},
		{"an unknown acquire takes nothing seen", []Op{
			unknown(permit(op(0, Acquire, "a", 0, 10, 0, 0), -1)), permit(op(1, Acquire, "b", 20, 30, 1, 1000), 0),
		}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, Semaphore(2), tc.ops, false, tc.want) })
	}
}

// TestStore: the fenced store.
func TestStore(t *testing.T) {
	w := func(client int, lease string, from int, tok uint64) Op {
		return op(client, Write, lease, from, from+1, tok, 0)
	}
	for _, tc := range []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"rising tokens admitted, a lower one refused", []Op{
			w(0, "a", 0, 1), w(0, "a", 10, 1), w(1, "b", 20, 3), failed(w(0, "a", 30, 1)),
		}, porcupine.Ok},
		{"a lower token admitted after a higher", []Op{
			w(1, "b", 0, 3), w(0, "a", 10, 2),
		}, porcupine.Illegal},
		{"a write refused although its token was the highest", []Op{
			w(0, "a", 0, 2), failed(w(1, "b", 10, 3)),
		}, porcupine.Illegal},
		{"one token written by two leases", []Op{
			w(0, "a", 0, 2), w(1, "b", 10, 2),
		}, porcupine.Illegal},
		{"a refusal explained by a concurrent write", []Op{
			op(0, Write, "a", 0, 100, 1, 0), failed(op(1, Write, "b", 10, 90, 0, 0)),
		}, porcupine.Ok},
		{"a refusal before any higher write began", []Op{
			failed(w(1, "b", 0, 1)), w(0, "a", 10, 2),
		}, porcupine.Illegal},
		{"an unknown write that explains a refusal", []Op{
			unknown(w(1, "b", 0, 5)), failed(w(0, "a", 10, 4)),
		}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, Store, tc.ops, true, tc.want) })
	}
}
