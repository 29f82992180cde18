package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Violation is one breach of a checker's property, with the evidence.
type Violation struct {
	Check    string // "C1" … "C5"
	Resource string
	At       time.Duration
	Detail   string
	// Leases are the leases involved, to pull their history out of a run.
	Leases []string
}

// String is one line for a report.
func (v Violation) String() string {
	return fmt.Sprintf("%s %s at %v: %s", v.Check, v.Resource, v.At.Round(time.Millisecond), v.Detail)
}

// grant is one successful acquisition and what its holder did with it.
type grant struct {
	ev    Event
	token uint64
	// begin is when the acquire was sent; start when its answer came back:
	// from start the client acts as the holder.
	begin, start time.Duration
	// end is when the validity ran out, after acknowledged extensions.
	end time.Duration
	// held is when the holder stopped acting as one: end, or the moment it
	// sent its release if earlier.
	held time.Duration
	// gone is when the lock surely stopped existing on every node without a
	// release: the gateway counts validity from when it answered, which is
	// before the answer came back but may be long after the acquire was
	// sent (a gateway paused mid-request), so it is the answer's return
	// (or an acknowledged extension's) plus the validity plus the drift
	// allowance (driftSlack).
	gone time.Duration
	// ended is when the lock surely stopped existing: gone, or the moment
	// an acknowledged release returned if earlier.
	ended time.Duration
	// releasedAt is when an acknowledged release returned; -1 if none.
	releasedAt time.Duration
	// brokenAt is when the first force release that may have broken the
	// grant was sent (one not refused, whose answer did not come before the
	// grant's acquire was sent); -1 if none. A force release ends the
	// holder's lease whatever its validity, and the holder is not told.
	brokenAt time.Duration
}

// grants rebuilds every grant from a history, per resource, in the order
// the acquisitions were sent.
// driftSlack bounds the gateway's drift allowance for the suite's TTLs (1%
// of at most 2 s, plus 2 ms), with room to spare.
const driftSlack = 50 * time.Millisecond

func grants(events []Event) map[string][]*grant {
	byLease := make(map[string]*grant)
	out := make(map[string][]*grant)
	sorted := append([]Event(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Invoke < sorted[j].Invoke })
	relInvoke := make(map[*grant]time.Duration)
	for _, e := range sorted {
		switch {
		case e.Op == OpAcquire && e.Outcome == Ok:
			g := &grant{ev: e, token: e.Token, begin: e.Invoke, start: e.Complete,
				end: e.Invoke + e.ValidFor, gone: e.Complete + e.ValidFor + driftSlack, releasedAt: -1, brokenAt: -1}
			byLease[e.Resource+"\x00"+e.Lease] = g
			out[e.Resource] = append(out[e.Resource], g)
		case e.Foreign:
			// A foreign operation says nothing about the lease's own grant.
		case e.Op == OpExtend && e.Outcome == Ok:
			if g := byLease[e.Resource+"\x00"+e.Lease]; g != nil {
				g.end = max(g.end, e.Invoke+e.ValidFor)
				g.gone = max(g.gone, e.Complete+e.ValidFor+driftSlack)
			}
		case e.Op == OpRelease:
			g := byLease[e.Resource+"\x00"+e.Lease]
			if g == nil {
				continue
			}
			if _, seen := relInvoke[g]; !seen {
				relInvoke[g] = e.Invoke
			}
			if e.Outcome == Ok && g.releasedAt < 0 {
				g.releasedAt = e.Complete
			}
		}
	}
	forced := forceReleases(sorted)
	for res, gs := range out {
		for _, g := range gs {
			g.held, g.ended = g.end, g.gone
			if ri, ok := relInvoke[g]; ok && ri < g.held {
				g.held = ri
			}
			for _, f := range forced[res] {
				if f.Outcome == Unknown || f.Complete > g.begin {
					g.brokenAt = f.Invoke
					// The holder still acts as one, but another lease may
					// be granted from the force release on (C1 leaves the
					// overlap to the model check, which orders the two).
					g.held = min(g.held, max(g.start, f.Invoke))
					break
				}
			}
			if g.releasedAt >= 0 && g.releasedAt < g.ended {
				g.ended = g.releasedAt
			}
		}
	}
	return out
}

// forceReleases returns, per resource and in the order they were sent,
// the force releases that may have broken a lock: every one but those
// refused (a 4xx: forbidden, or 404, no node of a quorum held the lock)
// or never sent (a refused dial).
func forceReleases(sorted []Event) map[string][]Event {
	out := map[string][]Event{}
	for _, e := range sorted {
		if e.Op != OpForceRelease || e.Outcome == Fail && (e.Status == 0 || e.Status/100 == 4) {
			continue
		}
		out[e.Resource] = append(out[e.Resource], e)
	}
	return out
}

// windows are the stretches of time a fault may excuse: each fault from its
// start to its end plus settle.
type windows [][2]time.Duration

func faultWindows(faults []Fault, settle time.Duration) windows {
	w := make(windows, 0, len(faults))
	for _, f := range faults {
		w = append(w, [2]time.Duration{f.Start, f.End + settle})
	}
	return w
}

func (w windows) touches(from, to time.Duration) bool {
	for _, x := range w {
		if from <= x[1] && to >= x[0] {
			return true
		}
	}
	return false
}

// CheckC1 reports two grants of one resource to different leases whose
// holding times overlap, where the overlap touches no fault window (a
// fault's span plus settle). A grant's holding time runs from when its
// acquire answered to when its validity ran out, its holder sent the
// release, or a force release that may have broken it was sent (the model
// check judges what follows a force release). excused counts the
// overlaps inside fault windows.
func CheckC1(events []Event, faults []Fault, settle time.Duration) (v []Violation, excused int) {
	win := faultWindows(faults, settle)
	for res, gs := range grants(events) {
		byStart := append([]*grant(nil), gs...)
		sort.Slice(byStart, func(i, j int) bool { return byStart[i].start < byStart[j].start })
		var cur *grant // the grant whose holding reaches furthest so far
		for _, g := range byStart {
			if g.held <= g.start {
				continue // its validity was gone before the answer came back
			}
			if cur != nil && g.start < cur.held && g.ev.Lease != cur.ev.Lease {
				to := min(g.held, cur.held)
				if win.touches(g.start, to) {
					excused++
				} else {
					v = append(v, Violation{Check: "C1", Resource: res, At: g.start, Detail: fmt.Sprintf(
						"held by token %d until %v and granted to token %d from %v",
						cur.token, cur.held.Round(time.Millisecond), g.token, g.start.Round(time.Millisecond)),
						Leases: []string{cur.ev.Lease, g.ev.Lease}})
				}
			}
			if cur == nil || g.held > cur.held {
				cur = g
			}
		}
	}
	sortViolations(v)
	return v, excused
}

// CheckC2 reports a token handed to two different leases of one resource,
// and a grant whose acquire was sent after another grant of the resource
// had surely ended (validity out, or release acknowledged) but whose token
// is not higher.
func CheckC2(events []Event) []Violation {
	var v []Violation
	for res, gs := range grants(events) {
		owner := make(map[uint64]*grant)
		for _, g := range gs {
			if o, dup := owner[g.token]; dup && o.ev.Lease != g.ev.Lease {
				v = append(v, Violation{Check: "C2", Resource: res, At: g.start, Detail: fmt.Sprintf(
					"token %d handed out twice: acquires sent at %v and %v",
					g.token, o.begin.Round(time.Millisecond), g.begin.Round(time.Millisecond)),
					Leases: []string{o.ev.Lease, g.ev.Lease}})
			} else if !dup {
				owner[g.token] = g
			}
		}
		byEnd := append([]*grant(nil), gs...)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].ended < byEnd[j].ended })
		best := make([]*grant, len(byEnd)) // best[i]: highest token among byEnd[:i+1]
		for i, g := range byEnd {
			best[i] = g
			if i > 0 && best[i-1].token > g.token {
				best[i] = best[i-1]
			}
		}
		for _, g := range gs {
			n := sort.Search(len(byEnd), func(i int) bool { return byEnd[i].ended >= g.begin })
			if n == 0 {
				continue
			}
			if prev := best[n-1]; g.token <= prev.token {
				v = append(v, Violation{Check: "C2", Resource: res, At: g.begin, Detail: fmt.Sprintf(
					"token %d for an acquire sent at %v, after the grant of token %d had ended at %v",
					g.token, g.begin.Round(time.Millisecond), prev.token, prev.ended.Round(time.Millisecond)),
					Leases: []string{prev.ev.Lease, g.ev.Lease}})
			}
		}
	}
	sortViolations(v)
	return v
}

// CheckC3 reads the fenced register's log of decisions and its final
// values. It reports an admitted token lower than one admitted before for
// the resource, one token admitted for two different leases, an
// acknowledged write missing from the admitted ones, and a resource whose
// final value is not the last admitted write. refused counts the stale
// writes the register turned away.
func CheckC3(events []Event, log []Admission, finals map[string]string) (v []Violation, refused int) {
	type key struct {
		res, lease, value string
		token             uint64
	}
	admitted := make(map[key]bool)
	highest := make(map[string]uint64)
	leaseOf := make(map[string]map[uint64]string)
	last := make(map[string]Admission)
	for _, a := range log {
		if !a.Admitted {
			refused++
			continue
		}
		admitted[key{a.Resource, a.Lease, a.Value, a.Token}] = true
		if h := highest[a.Resource]; a.Token < h {
			v = append(v, Violation{Check: "C3", Resource: a.Resource, At: a.At, Detail: fmt.Sprintf(
				"admitted token %d after token %d", a.Token, h)})
		} else {
			highest[a.Resource] = a.Token
		}
		if leaseOf[a.Resource] == nil {
			leaseOf[a.Resource] = make(map[uint64]string)
		}
		if l, ok := leaseOf[a.Resource][a.Token]; ok && l != a.Lease {
			v = append(v, Violation{Check: "C3", Resource: a.Resource, At: a.At, Leases: []string{l, a.Lease},
				Detail: fmt.Sprintf("token %d admitted for two different leases (%.12s… then %.12s…)", a.Token, l, a.Lease)})
		}
		leaseOf[a.Resource][a.Token] = a.Lease
		last[a.Resource] = a
	}
	for _, e := range events {
		if e.Op == OpWrite && e.Outcome == Ok && !admitted[key{e.Resource, e.Lease, e.Value, e.Token}] {
			v = append(v, Violation{Check: "C3", Resource: e.Resource, At: e.Complete, Detail: fmt.Sprintf(
				"acknowledged write of token %d is not among the admitted writes", e.Token)})
		}
	}
	for res, a := range last {
		if got, ok := finals[res]; !ok || got != a.Value {
			v = append(v, Violation{Check: "C3", Resource: res, At: a.At, Detail: fmt.Sprintf(
				"final value %q, want the last admitted write %q (token %d)", got, a.Value, a.Token)})
		}
	}
	sortViolations(v)
	return v, refused
}

// Gap is how long acquisitions stopped succeeding around one fault.
type Gap struct {
	Fault Fault
	// Longest is the longest stretch without a successful acquire from the
	// last success before the fault began to the recovery (or the end of
	// the history).
	Longest time.Duration
	// Recovery is how long after the fault healed the first acquire sent
	// after the heal succeeded; -1 if none did before the history ended.
	Recovery time.Duration
}

// CheckC4 reports a fault after whose heal no acquire sent after the heal
// succeeded within bound (the TTL plus the retry bound), or within
// lossBound after a fault in which a node lost its data (such a node is
// quarantined for the largest TTL before it counts again, by design). It
// also measures, per fault, the longest stretch without a successful
// acquire. Faults that healed less than their bound before runEnd, or after
// which no acquire was sent within it, are not judged.
func CheckC4(events []Event, faults []Fault, bound, lossBound, runEnd time.Duration) (v []Violation, gaps []Gap) {
	var oks []Event
	for _, e := range events {
		if e.Op == OpAcquire && e.Outcome == Ok {
			oks = append(oks, e)
		}
	}
	byComplete := append([]Event(nil), oks...)
	sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].Complete < byComplete[j].Complete })
	for _, f := range faults {
		g := Gap{Fault: f, Recovery: -1}
		var first time.Duration = -1
		for _, e := range oks {
			if e.Invoke >= f.End && (first < 0 || e.Complete < first) {
				first = e.Complete
			}
		}
		if first >= 0 {
			g.Recovery = first - f.End
		}
		stop := runEnd // until recovery, or the end of the history
		if first >= 0 {
			stop = first
		}
		prev := f.Start
		for _, e := range byComplete {
			if e.Complete <= f.Start {
				prev = e.Complete // the last success before the fault
				continue
			}
			if e.Complete > stop {
				break
			}
			g.Longest = max(g.Longest, e.Complete-prev)
			prev = e.Complete
		}
		g.Longest = max(g.Longest, stop-prev)
		gaps = append(gaps, g)
		bound := bound
		if f.DataLoss {
			bound = lossBound
		}
		if f.End+bound > runEnd || !attempted(events, f.End, f.End+bound) {
			continue
		}
		if g.Recovery < 0 || g.Recovery > bound {
			v = append(v, Violation{Check: "C4", Resource: f.Target, At: f.End, Detail: fmt.Sprintf(
				"%s healed at %v; no acquire sent afterwards succeeded within %v (recovery %v)",
				f.Kind, f.End.Round(time.Millisecond), bound, g.Recovery)})
		}
	}
	sortViolations(v)
	return v, gaps
}

// attempted reports whether an acquire was sent in [from, to].
func attempted(events []Event, from, to time.Duration) bool {
	for _, e := range events {
		if e.Op == OpAcquire && e.Invoke >= from && e.Invoke <= to {
			return true
		}
	}
	return false
}

// CheckC5 reports an extend or release sent with a foreign lease that
// succeeded although the lease was never granted, or its release had been
// acknowledged before, or another lease's grant of the resource was being
// held for the whole of the call.
func CheckC5(events []Event) []Violation {
	var v []Violation
	all := grants(events)
	byLease := make(map[string]*grant)
	for _, gs := range all {
		for _, g := range gs {
			byLease[g.ev.Resource+"\x00"+g.ev.Lease] = g
		}
	}
	for _, e := range events {
		if !e.Foreign || e.Outcome != Ok || (e.Op != OpExtend && e.Op != OpRelease) {
			continue
		}
		own := byLease[e.Resource+"\x00"+e.Lease]
		var why string
		switch {
		case e.NeverGranted || own == nil:
			why = "a lease that was never granted"
		case own.releasedAt >= 0 && own.releasedAt < e.Invoke:
			why = fmt.Sprintf("a lease whose release was acknowledged at %v", own.releasedAt.Round(time.Millisecond))
		default:
			for _, g := range all[e.Resource] {
				if g != own && g.start <= e.Invoke && g.held >= e.Complete {
					why = fmt.Sprintf("a stale lease while token %d was held", g.token)
					break
				}
			}
		}
		if why != "" {
			v = append(v, Violation{Check: "C5", Resource: e.Resource, At: e.Invoke,
				Detail: fmt.Sprintf("%s answered %d to %s", e.Op, e.Status, why), Leases: []string{e.Lease}})
		}
	}
	sortViolations(v)
	return v
}

func sortViolations(v []Violation) {
	sort.SliceStable(v, func(i, j int) bool {
		if v[i].At != v[j].At {
			return v[i].At < v[j].At
		}
		return v[i].Resource < v[j].Resource
	})
}

// CheckAnswers reports answers that were not true (issue 11, item 4: a
// reply lost after a script ran must not turn into a wrong answer): an
// acquire with a lease's first attempt answered 200 "same lease again"
// instead of 201, and a release by the holder, sent while its grant was
// still valid, answered 404 "not held" although no node lost its data
// during the grant, no force release may have broken it, and its gateway
// could act on it in time.
func CheckAnswers(events []Event, faults []Fault) []Violation {
	var v []Violation
	seen := make(map[string]bool)
	sorted := append([]Event(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Invoke < sorted[j].Invoke })
	for _, e := range sorted {
		if e.Op != OpAcquire {
			continue
		}
		k := e.Resource + "\x00" + e.Lease
		if e.Outcome == Ok && e.Status == 200 && !seen[k] {
			v = append(v, Violation{Check: "A", Resource: e.Resource, At: e.Invoke, Leases: []string{e.Lease},
				Detail: "a lease's first acquire answered 200 (same lease again) instead of 201"})
		}
		seen[k] = true
	}
	byLease := make(map[string]*grant)
	for _, gs := range grants(events) {
		for _, g := range gs {
			byLease[g.ev.Resource+"\x00"+g.ev.Lease] = g
		}
	}
	for _, e := range sorted {
		if e.Op != OpRelease || e.Foreign || e.Status != 404 {
			continue
		}
		g := byLease[e.Resource+"\x00"+e.Lease]
		if g == nil || e.Invoke >= g.end {
			continue
		}
		if !answeredInTime(e, g, faults) || g.brokenAt >= 0 && g.brokenAt <= e.Complete {
			continue // the gateway acted on it too late, or a force release broke the lock first
		}
		lost := false
		for _, f := range faults {
			if f.DataLoss && f.Start <= e.Complete && f.End >= g.begin {
				lost = true
			}
		}
		if !lost {
			v = append(v, Violation{Check: "A", Resource: e.Resource, At: e.Invoke, Leases: []string{e.Lease}, Detail: fmt.Sprintf(
				"the holder's release, sent %v before its validity ran out, answered 404",
				(g.end - e.Invoke).Round(time.Millisecond))})
		}
	}
	sortViolations(v)
	return v
}

// answeredInTime reports whether the gateway that release e was sent to
// could have acted on it before grant g's validity ran out: it was not
// stopped (paused or killed) from the release's sending to past that
// moment. A request sent to a paused gateway waits in its socket until
// the gateway resumes; if that is after the validity, "not held" is the
// truth by then.
func answeredInTime(e Event, g *grant, faults []Fault) bool {
	for _, f := range faults {
		if slices.Contains(f.Gateways, e.Gateway) && f.Start <= e.Complete && f.End >= e.Invoke && f.End >= g.end {
			return false
		}
	}
	return true
}
