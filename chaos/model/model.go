package model

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation does.
type Kind uint8

// The kinds of operation the models know.
const (
	Acquire      Kind = iota // a lock or a permit taken
	Extend                   // a lock's or a permit's validity renewed
	Release                  // a lock or a permit given back by its holder
	ForceRelease             // a lock broken whatever lease holds it
	Write                    // a fenced write to the store
)

var kindNames = [...]string{"acquire", "extend", "release", "force-release", "write"}

// String names the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind%d", k)
}

// Outcome is what the client learnt of an operation.
type Outcome uint8

// Outcomes: Ok took effect, Fail surely did not, Unknown may have at any
// moment after it was sent, Maybe may have before it completed (an
// answered failure that may have acted on some nodes: a release answered
// 503).
const (
	Ok Outcome = iota
	Fail
	Unknown
	Maybe
)

// unsure reports whether o may or may not have taken effect.
func (o Outcome) unsure() bool { return o == Unknown || o == Maybe }

// Never is the completion of an operation whose outcome is unknown: its
// effect may land at any moment after it was sent.
const Never = time.Duration(math.MaxInt64)

// Op is one client operation as the models read it.
type Op struct {
	Client int
	Kind   Kind
	// Key partitions the history: the resource of a lock, the name of a
	// semaphore, the key of a store.
	Key   string
	Lease string
	// Invoke and Complete are read from the run's one monotonic clock.
	// Complete is ignored for an Unknown operation (see Never).
	Invoke, Complete time.Duration
	Outcome          Outcome
	// Token is the token answered (acquire, extend) or carried (write).
	Token uint64
	// Valid is the validity answered by an acquire or extend that took
	// effect, counted from Invoke.
	Valid time.Duration
	// Permit is the permit an Ok semaphore operation took or named.
	Permit int
	// Outside marks an operation that overlapped a fault outside
	// lockgate's stated model (a node's clock stepped past the drift
	// allowance): an acquire so marked is not held to the holder's end
	// (rule M7).
	Outside bool
	// Detail is shown with the operation in a history viewer.
	Detail string
}

// end is when the operation surely completed.
func (o Op) end() time.Duration {
	if o.Outcome == Unknown {
		return Never
	}
	return o.Complete
}

// String describes the operation for the history viewer.
func (o Op) String() string {
	lease := o.Lease
	if len(lease) > 12 {
		lease = lease[:12] + "…"
	}
	s := fmt.Sprintf("%s %s", o.Kind, lease)
	switch {
	case o.Outcome.unsure():
		s += " → ?"
	case o.Outcome == Fail && o.Kind == Write:
		s += fmt.Sprintf(" t%d → refused", o.Token)
	case o.Outcome == Fail:
		s += " → fail"
	case o.Kind == Write:
		s += fmt.Sprintf(" t%d → ok", o.Token)
	case o.Kind == Acquire || o.Kind == Extend:
		s += fmt.Sprintf(" → t%d valid %v", o.Token, o.Valid)
	default:
		s += " → ok"
	}
	if o.Detail != "" {
		s += " (" + o.Detail + ")"
	}
	if o.Outside {
		s += " [outside the model]"
	}
	return s
}

// noop reports whether o changes nothing in any model whether it took
// effect or not (M5's unsure extend, S3's unsure acquire of a permit not
// named): stepping it would only cost the search.
func (o Op) noop() bool {
	return o.Outcome.unsure() && (o.Kind == Extend || o.Kind == Acquire && o.Permit < 0)
}

// History turns ops into porcupine operations, leaving out the definite
// failures a model does not step (rule M0; the store keeps its refusals,
// F2) and the unsure operations that change nothing (noop). Clients are renumbered from 0, as the history viewer wants.
func History(ops []Op, keepFailures bool) []porcupine.Operation {
	ids := map[int]int{}
	clients := []int{}
	for _, o := range ops {
		if _, ok := ids[o.Client]; !ok {
			ids[o.Client] = 0
			clients = append(clients, o.Client)
		}
	}
	sort.Ints(clients)
	for i, c := range clients {
		ids[c] = i
	}
	var out []porcupine.Operation
	for _, o := range ops {
		if o.Outcome == Fail && !keepFailures || o.noop() {
			continue
		}
		out = append(out, porcupine.Operation{ClientId: ids[o.Client], Input: o, Output: o.Outcome,
			Call: int64(o.Invoke), Return: int64(o.end())})
	}
	return out
}

// byKey partitions a history by Op.Key.
func byKey(history []porcupine.Operation) [][]porcupine.Operation {
	m := map[string][]porcupine.Operation{}
	var keys []string
	for _, h := range history {
		k := h.Input.(Op).Key
		if _, ok := m[k]; !ok {
			keys = append(keys, k)
		}
		m[k] = append(m[k], h)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

// byPermit partitions a semaphore's history by Op.Key and Op.Permit: the
// permits are locks of their own (S2), and an operation that names no
// permit below K is illegal in any partition (S1).
func byPermit(history []porcupine.Operation) [][]porcupine.Operation {
	var out [][]porcupine.Operation
	for _, part := range byKey(history) {
		m := map[int][]porcupine.Operation{}
		var permits []int
		for _, h := range part {
			p := h.Input.(Op).Permit
			if _, ok := m[p]; !ok {
				permits = append(permits, p)
			}
			m[p] = append(m[p], h)
		}
		sort.Ints(permits)
		for _, p := range permits {
			out = append(out, m[p])
		}
	}
	return out
}

// lock is one fenced lock's state (a resource's, or a permit's).
type lock struct {
	holder    string
	holderTok uint64
	end       time.Duration // the holder's promised end (M1)
	tok       uint64        // the highest token granted or answered (M2)
}

// step applies o to l at the earliest moment at (see the package doc) and
// returns every state it may lead to with its new moment; none when o
// cannot take effect.
func (l lock) step(at0 time.Duration, o Op) (outs []lock, ats []time.Duration) {
	at := max(at0, o.Invoke)
	if o.Outcome.unsure() {
		// The branch where it did nothing needs no moment of its own.
		outs, ats = append(outs, l), append(ats, at0)
	}
	if at > o.end() {
		return outs, ats
	}
	switch o.Kind {
	case Acquire:
		if o.Outcome.unsure() {
			// M5: nothing, or a grant no one was promised.
			if l.holder == o.Lease { // a retry: nothing new
				return outs, ats
			}
			g, gat := l, at
			if g.holder != "" && !o.Outside { // M1, M7
				gat = max(gat, g.end)
			}
			// The grant's token is above every token before it.
			g.holder, g.end, g.tok = o.Lease, o.Invoke, l.tok+1
			g.holderTok = g.tok
			return append(outs, g), append(ats, gat)
		}
		if l.holder == o.Lease {
			if o.Token < l.holderTok { // M2
				return nil, nil
			}
		} else {
			if l.holder != "" && !o.Outside {
				at = max(at, l.end) // M1, M7
				if at > o.end() {
					return nil, nil
				}
			}
			if o.Token <= l.tok { // M2
				return nil, nil
			}
			l.end = 0
		}
		l.holder, l.holderTok, l.tok = o.Lease, o.Token, max(l.tok, o.Token)
		l.end = max(l.end, o.Invoke+o.Valid)
		return []lock{l}, []time.Duration{at}
	case Extend:
		if o.Outcome.unsure() { // M5
			return outs, ats
		}
		if l.holder != o.Lease || o.Token < l.holderTok { // M3
			return nil, nil
		}
		l.holderTok, l.tok = o.Token, max(l.tok, o.Token)
		l.end = max(l.end, o.Invoke+o.Valid)
		return []lock{l}, []time.Duration{at}
	case Release, ForceRelease:
		free := l
		free.holder, free.holderTok, free.end = "", 0, 0
		if o.Kind == Release && l.holder != o.Lease { // M3
			return outs, ats
		}
		// M6: a force release frees the lock whatever the holder's end,
		// at its own moment; the tokens stay (M4).
		if o.Outcome.unsure() { // M5, M6
			return append(outs, free), append(ats, at)
		}
		return []lock{free}, []time.Duration{at} // M4
	}
	return nil, nil
}

// mutexState is the fenced mutex's state: the lock and the earliest
// moment its operations can all have taken effect.
type mutexState struct {
	lock
	at time.Duration
}

// Mutex is the fenced mutex per resource (rules M0 to M7).
var Mutex = (&porcupine.NondeterministicModel{
	Partition: byKey,
	Init:      func() []any { return []any{mutexState{}} },
	Step: func(state, input, _ any) []any {
		s, o := state.(mutexState), input.(Op)
		outs, ats := s.lock.step(s.at, o)
		next := make([]any, len(outs))
		for i := range outs {
			next[i] = mutexState{outs[i], ats[i]}
		}
		return next
	},
	DescribeOperation: describe,
	DescribeState: func(state any) string {
		s := state.(mutexState)
		return s.lock.String() + fmt.Sprintf(" at %v", s.at.Round(time.Millisecond))
	},
}).ToModel()

func describe(input, _ any) string { return input.(Op).String() }

// String describes a lock's state.
func (l lock) String() string {
	if l.holder == "" {
		return fmt.Sprintf("free, highest token %d", l.tok)
	}
	h := l.holder
	if len(h) > 12 {
		h = h[:12] + "…"
	}
	return fmt.Sprintf("held by %s (t%d) until %v, highest token %d", h, l.holderTok, l.end.Round(time.Millisecond), l.tok)
}

// MaxPermits is the largest K that Semaphore models.
const MaxPermits = 8

type semState struct {
	permits [MaxPermits]lock
	at      time.Duration
}

// Semaphore is the fenced semaphore of k permits (rules S1 to S3, and M0 to
// M5 per permit). k is at most MaxPermits.
func Semaphore(k int) porcupine.Model {
	if k < 1 || k > MaxPermits {
		panic(fmt.Sprintf("model: a semaphore of %d permits (1 to %d)", k, MaxPermits))
	}
	return (&porcupine.NondeterministicModel{
		Partition: byPermit,
		Init:      func() []any { return []any{semState{}} },
		Step: func(state, input, _ any) []any {
			s, o := state.(semState), input.(Op)
			if o.Kind == Acquire && o.Outcome.unsure() { // S3
				return []any{s}
			}
			if o.Permit < 0 || o.Permit >= k { // S1
				return nil
			}
			outs, ats := s.permits[o.Permit].step(s.at, o) // S2
			next := make([]any, len(outs))
			for i := range outs {
				n := s
				n.permits[o.Permit], n.at = outs[i], ats[i]
				next[i] = n
			}
			return next
		},
		DescribeOperation: describe,
		DescribeState: func(state any) string {
			s := state.(semState)
			out := ""
			for i := range k {
				out += fmt.Sprintf("permit %d: %v; ", i, s.permits[i])
			}
			return out + fmt.Sprintf("at %v", s.at.Round(time.Millisecond))
		},
	}).ToModel()
}

type storeState struct {
	highest uint64
	lease   string
}

// Store is the fenced store, one partition per key (rules F1 to F4).
var Store = (&porcupine.NondeterministicModel{
	Partition: byKey,
	Init:      func() []any { return []any{storeState{}} },
	Step: func(state, input, _ any) []any {
		s, o := state.(storeState), input.(Op)
		admitted := storeState{o.Token, o.Lease}
		canAdmit := o.Token > s.highest || o.Token == s.highest && (s.lease == "" || s.lease == o.Lease) // F1, F3
		switch o.Outcome {
		case Ok:
			if canAdmit {
				return []any{admitted}
			}
		case Fail:
			if o.Token < s.highest { // F2
				return []any{s}
			}
		case Unknown, Maybe: // F4
			if canAdmit {
				return []any{s, admitted}
			}
			return []any{s}
		}
		return nil
	},
	DescribeOperation: describe,
	DescribeState: func(state any) string {
		s := state.(storeState)
		return fmt.Sprintf("highest admitted t%d", s.highest)
	},
}).ToModel()

// Result is one model check of a history.
type Result struct {
	Model string
	Ops   int // operations checked
	// Verdict is porcupine's: Ok, Illegal, or Unknown when the check ran
	// out of time.
	Verdict porcupine.CheckResult
	Took    time.Duration
	// Info is what the history viewer (porcupine.Visualize) draws.
	Info porcupine.LinearizationInfo
	m    porcupine.Model
}

// Check checks history against m within timeout (0: no limit).
func Check(name string, m porcupine.Model, history []porcupine.Operation, timeout time.Duration) Result {
	start := time.Now()
	verdict, info := porcupine.CheckOperationsVerbose(m, history, timeout)
	return Result{Model: name, Ops: len(history), Verdict: verdict, Took: time.Since(start), Info: info, m: m}
}

// Visualize writes the history viewer's HTML page to path.
func (r Result) Visualize(path string) error { return porcupine.VisualizePath(r.m, r.Info, path) }

// String is one line for a log.
func (r Result) String() string {
	return fmt.Sprintf("model %s: %d operations, %s in %v", r.Model, r.Ops, r.Verdict, r.Took.Round(time.Millisecond))
}
