package fencingtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lockgate/lockgate/fencing"
)

type kind uint8

const (
	kindPut kind = iota
	kindAdmit
	kindGet
)

func (k kind) String() string { return [...]string{"Put", "Admit", "Get"}[k] }

// event is one call in a concurrent history. start and end are ticks of a
// shared atomic clock taken just before the call and just after it
// returned: if a.end < b.start, a returned before b began.
type event struct {
	kind       kind
	actor      string
	resource   string // Put and Admit: the resource; Get: the key (data keys equal their resource)
	token      uint64
	value      string
	start, end uint64
	err        error
	got        fencing.Record // Get
}

func (e *event) String() string {
	switch e.kind {
	case kindGet:
		return fmt.Sprintf("%s Get(%q) [%d,%d] = token %d value %q err %v",
			e.actor, e.resource, e.start, e.end, e.got.Token, e.got.Value, e.err)
	default:
		return fmt.Sprintf("%s %s(%q, token %d) [%d,%d] err %v",
			e.actor, e.kind, e.resource, e.token, e.start, e.end, e.err)
	}
}

// state is what the store held after the history ended.
type state struct {
	highest map[string]uint64          // resource → Highest
	records map[string]*fencing.Record // data key → Get, nil if not found
}

// workload is the shape of a concurrent run.
type workload struct {
	writers, opsPerWriter, readers int
	data                           []string // resources written with Put(r, r, ...)
	gates                          []string // resources only Admitted
	base                           map[string]uint64
	seed                           uint64
}

func defaultWorkload() workload {
	return workload{
		writers:      16,
		opsPerWriter: 100,
		readers:      2,
		data:         []string{"fencingtest:race:hot0", "fencingtest:race:hot1", "fencingtest:race:big"},
		gates:        []string{"fencingtest:race:gate0", "fencingtest:race:gate1"},
		// Tokens on "big" run up to 2^53-1, where doubles have no room to spare.
		base: map[string]uint64{"fencingtest:race:big": fencing.MaxToken - uint64(16*100)},
		seed: 0x5eed,
	}
}

// run races the workload against s and returns every call it made. Each
// goroutine keeps its own events and hands them over on a channel when it
// is done; none of them touches t.
func (w workload) run(ctx context.Context, s Store) []event {
	var clock atomic.Uint64
	grants := make(map[string]*atomic.Uint64)
	for _, r := range append(slices.Clone(w.data), w.gates...) {
		grants[r] = new(atomic.Uint64)
		grants[r].Store(w.base[r])
	}

	results := make(chan []event, w.writers+w.readers)
	var writers sync.WaitGroup
	for id := range w.writers {
		writers.Go(func() {
			rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
			held := make(map[string]uint64) // the token this writer last drew per resource
			actor := fmt.Sprintf("writer%02d", id)
			var evs []event
			for i := range w.opsPerWriter {
				ev := event{kind: kindPut, actor: actor}
				if rng.IntN(4) == 0 {
					ev.kind, ev.resource = kindAdmit, w.gates[rng.IntN(len(w.gates))]
				} else {
					ev.resource = w.data[rng.IntN(len(w.data))]
				}
				g := grants[ev.resource]
				switch p := rng.IntN(100); {
				case p < 55: // a new grant: the lock passed to this writer
					ev.token = g.Add(1)
					held[ev.resource] = ev.token
				case p < 80 && held[ev.resource] != 0: // the same holder writes again
					ev.token = held[ev.resource]
				default: // a writer waking from a pause with an old grant
					low, high := w.base[ev.resource]+1, max(g.Load(), w.base[ev.resource]+1)
					ev.token = low + rng.Uint64N(high-low+1)
				}
				ev.value = fmt.Sprintf("%s-op%03d-t%d", actor, i, ev.token)
				if rng.IntN(8) == 0 {
					runtime.Gosched() // let others overtake between grant and write
				}
				ev.start = clock.Add(1)
				if ev.kind == kindAdmit {
					ev.err = s.Admit(ctx, ev.resource, ev.token)
				} else {
					ev.err = s.Put(ctx, ev.resource, ev.resource, ev.token, []byte(ev.value))
				}
				ev.end = clock.Add(1)
				evs = append(evs, ev)
			}
			results <- evs
		})
	}

	stop := make(chan struct{})
	var readers sync.WaitGroup
	for id := range w.readers {
		readers.Go(func() {
			actor := fmt.Sprintf("reader%02d", id)
			var evs []event
			for {
				select {
				case <-stop:
					results <- evs
					return
				default:
				}
				for _, key := range w.data {
					ev := event{kind: kindGet, actor: actor, resource: key}
					ev.start = clock.Add(1)
					ev.got, ev.err = s.Get(ctx, key)
					ev.end = clock.Add(1)
					evs = append(evs, ev)
				}
				runtime.Gosched()
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	close(results)

	var all []event
	for evs := range results {
		all = append(all, evs...)
	}
	return all
}

// final reads the state the checker compares the history with.
func (w workload) final(ctx context.Context, s Store) (state, error) {
	st := state{highest: map[string]uint64{}, records: map[string]*fencing.Record{}}
	for _, r := range append(slices.Clone(w.data), w.gates...) {
		h, err := s.Highest(ctx, r)
		if err != nil {
			return st, fmt.Errorf("Highest(%q): %w", r, err)
		}
		st.highest[r] = h
	}
	for _, k := range w.data {
		rec, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, fencing.ErrNotFound):
			st.records[k] = nil
		case err != nil:
			return st, fmt.Errorf("Get(%q): %w", k, err)
		default:
			st.records[k] = &rec
		}
	}
	return st, nil
}

func testConcurrent(t *testing.T, s Store) {
	ctx := context.Background()
	w := defaultWorkload()
	events := w.run(ctx, s)
	fin, err := w.final(ctx, s)
	if err != nil {
		t.Fatalf("reading the final state: %v", err)
	}
	violations := check(events, fin)
	for i, v := range violations {
		if i == 20 {
			t.Errorf("... and %d more violations", len(violations)-i)
			break
		}
		t.Error(v)
	}
	var admitted, refused int
	for _, ev := range events {
		switch {
		case ev.kind == kindGet:
		case ev.err == nil:
			admitted++
		case errors.Is(ev.err, fencing.ErrStaleToken):
			refused++
		}
	}
	t.Logf("%d writers, %d calls: %d admitted, %d refused as stale, %d reads",
		w.writers, len(events), admitted, refused, len(events)-admitted-refused)
}

// check returns every way in which events and the final state contradict
// the fencing guarantees. Data resources are those with an entry in
// fin.records; every resource must have one in fin.highest.
func check(events []event, fin state) []string {
	byRes := make(map[string][]*event)
	for i := range events {
		byRes[events[i].resource] = append(byRes[events[i].resource], &events[i])
	}
	resources := make([]string, 0, len(fin.highest))
	for r := range fin.highest {
		resources = append(resources, r)
	}
	sort.Strings(resources)

	var out []string
	for _, res := range resources {
		h, bad := split(res, byRes[res])
		out = append(out, bad...)
		out = append(out, h.checkAdmittedNeverGoDown()...)
		out = append(out, h.checkRefusals()...)
		out = append(out, h.checkReads()...)
		out = append(out, h.checkFinal(fin)...)
	}
	return out
}

// resourceHistory is one resource's calls, sorted by what became of them.
type resourceHistory struct {
	res                            string
	admitted, puts, refused, reads []*event
	putByValue                     map[string]*event // admitted Puts by the value they wrote (values are unique)
}

// split sorts a resource's calls by outcome, and returns what is wrong with
// them already: unexpected errors, or a workload that admitted or refused
// nothing and so tested nothing.
func split(res string, evs []*event) (resourceHistory, []string) {
	h := resourceHistory{res: res, putByValue: make(map[string]*event)}
	var out []string
	for _, ev := range evs {
		switch {
		case ev.kind == kindGet:
			h.reads = append(h.reads, ev)
		case ev.err == nil:
			h.admitted = append(h.admitted, ev)
			if ev.kind == kindPut {
				h.puts = append(h.puts, ev)
				h.putByValue[ev.value] = ev
			}
		case errors.Is(ev.err, fencing.ErrStaleToken):
			h.refused = append(h.refused, ev)
		default:
			out = append(out, fmt.Sprintf("%s: unexpected error", ev))
		}
	}
	if len(h.admitted) == 0 || len(h.refused) == 0 {
		out = append(out, fmt.Sprintf("resource %q: %d writes admitted and %d refused; "+
			"the workload must produce both to test anything", res, len(h.admitted), len(h.refused)))
	}
	return h, out
}

// checkAdmittedNeverGoDown: an admitted token is never lower than one
// admitted before it began.
func (h resourceHistory) checkAdmittedNeverGoDown() []string {
	var out []string
	done := before(h.admitted)
	for _, b := range h.admitted {
		if a := done.maxEndedBefore(b.start); a != nil && a.token > b.token {
			out = append(out, fmt.Sprintf("token went down: %s was admitted after %s had been", b, a))
		}
	}
	return out
}

// checkRefusals: a refusal names a higher token that some write had begun
// to admit.
func (h resourceHistory) checkRefusals() []string {
	var out []string
	for _, r := range h.refused {
		var se *fencing.StaleTokenError
		if !errors.As(r.err, &se) {
			out = append(out, fmt.Sprintf("%s: stale error is not a *StaleTokenError", r))
			continue
		}
		if se.Resource != r.resource || se.Token != r.token || se.Highest <= r.token {
			out = append(out, fmt.Sprintf("%s: error fields %+v do not describe a stale token", r, *se))
			continue
		}
		if !slices.ContainsFunc(h.admitted, func(a *event) bool { return a.token == se.Highest && a.start < r.end }) {
			out = append(out, fmt.Sprintf("%s: refused in favor of token %d, which no write had begun to admit",
				r, se.Highest))
		}
	}
	return out
}

// checkReads: readers see whole writes, never going back, and never older
// than a write that returned before the read began.
func (h resourceHistory) checkReads() []string {
	var out []string
	putsDone := before(h.puts)
	lastSeen := make(map[string]uint64) // actor → token last read
	reads := slices.Clone(h.reads)
	slices.SortFunc(reads, func(a, b *event) int { return cmpU64(a.start, b.start) })
	for _, rd := range reads {
		tok, bad := h.readToken(rd)
		if bad != "" {
			out = append(out, bad)
			if rd.err != nil {
				continue
			}
		}
		if a := putsDone.maxEndedBefore(rd.start); a != nil && a.token > tok {
			out = append(out, fmt.Sprintf("%s: read an older token than %s, which returned before the read began", rd, a))
		}
		if prev := lastSeen[rd.actor]; tok < prev {
			out = append(out, fmt.Sprintf("%s: token went back from %d for this reader", rd, prev))
		}
		lastSeen[rd.actor] = tok
	}
	return out
}

// readToken returns the token a read saw (0 for not found) and what is
// wrong with the read on its own: an unexpected error, or a record that no
// admitted Put wrote.
func (h resourceHistory) readToken(rd *event) (uint64, string) {
	switch {
	case errors.Is(rd.err, fencing.ErrNotFound):
		return 0, ""
	case rd.err != nil:
		return 0, fmt.Sprintf("%s: unexpected error", rd)
	}
	tok := rd.got.Token
	p := h.putByValue[string(rd.got.Value)]
	if p == nil || p.token != tok || rd.got.Resource != h.res || rd.got.Key != h.res || p.start > rd.end {
		return tok, fmt.Sprintf("%s: no admitted Put wrote this record", rd)
	}
	return tok, ""
}

// checkFinal: the final state holds the highest admitted token, and a data
// key the value of the Put that wrote it.
func (h resourceHistory) checkFinal(fin state) []string {
	var out []string
	var maxAll, maxPut uint64
	for _, a := range h.admitted {
		maxAll = max(maxAll, a.token)
		if a.kind == kindPut {
			maxPut = max(maxPut, a.token)
		}
	}
	res := h.res
	if fin.highest[res] != maxAll {
		out = append(out, fmt.Sprintf("resource %q: final Highest is %d, highest admitted token is %d",
			res, fin.highest[res], maxAll))
	}
	rec, isData := fin.records[res]
	switch {
	case !isData:
	case rec == nil && maxPut != 0:
		out = append(out, fmt.Sprintf("key %q: not found at the end, but token %d was written", res, maxPut))
	case rec != nil:
		p := h.putByValue[string(rec.Value)]
		if rec.Token != maxPut || p == nil || p.token != rec.Token {
			out = append(out, fmt.Sprintf("key %q: final record has token %d and value %q; want the value "+
				"of an admitted Put with the highest written token %d", res, rec.Token, rec.Value, maxPut))
		}
	}
	return out
}

// doneIndex answers "which admitted call with the highest token had
// returned before tick t?".
type doneIndex struct {
	byEnd  []*event
	maxIdx []int // maxIdx[i]: index in byEnd of the highest token among byEnd[:i+1]
}

func before(evs []*event) doneIndex {
	d := doneIndex{byEnd: slices.Clone(evs)}
	slices.SortFunc(d.byEnd, func(a, b *event) int { return cmpU64(a.end, b.end) })
	d.maxIdx = make([]int, len(d.byEnd))
	for i, ev := range d.byEnd {
		d.maxIdx[i] = i
		if i > 0 && d.byEnd[d.maxIdx[i-1]].token >= ev.token {
			d.maxIdx[i] = d.maxIdx[i-1]
		}
	}
	return d
}

func (d doneIndex) maxEndedBefore(t uint64) *event {
	n := sort.Search(len(d.byEnd), func(i int) bool { return d.byEnd[i].end >= t })
	if n == 0 {
		return nil
	}
	return d.byEnd[d.maxIdx[n-1]]
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
