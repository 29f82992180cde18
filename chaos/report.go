package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lockgate/lockgate/chaos/model"
)

// NodeMemory is one Redis node's key count (DBSIZE) and used_memory.
type NodeMemory struct {
	Keys       int64
	UsedMemory int64
}

// Summary is what one run found, for the test log and RELIABILITY.md.
type Summary struct {
	Profile   string
	Seed      uint64
	Started   time.Time
	Duration  time.Duration
	Clients   int
	Nodes     int
	Gateways  int
	TTL       time.Duration
	Bound     time.Duration // C4: TTL plus the retry bound
	LossBound time.Duration // C4 after a fault with data loss: plus the quarantine
	Unsafe    bool          // the data-loss protection was switched off
	Events    []Event
	Faults    []Fault
	C1        []Violation
	C1Excused int // overlaps inside fault windows
	C2        []Violation
	C3        []Violation
	C4        []Violation
	C5        []Violation
	// Answers are answers that were not true (CheckAnswers).
	Answers []Violation
	// Outside are the violations of C2, C3, C5 and A found in the windows
	// of faults outside lockgate's stated model (Fault.Outside), and
	// OutsideModels the model checks that rejected the history until the
	// acquires in those windows were marked (CheckModelsOutside): counted
	// apart, they fail no test.
	Outside       []Violation
	OutsideModels []model.Result
	Refused       int // stale writes the fenced register refused
	Gaps          []Gap
	MemBefore     []NodeMemory
	MemAfter      []NodeMemory
	// MaxFaultyNodes is the most nodes faulty at one moment; WipedNodes the
	// nodes that lost their data at some point.
	MaxFaultyNodes int
	WipedNodes     []int
	// Stalls are the node events slower than 25 ms (see Stall).
	Stalls []Stall
	// Models are the model checks of the history (CheckModels).
	Models []model.Result
	// Unprotected is the run of the two episodes with the protection off,
	// when the report includes one.
	Unprotected *Summary
}

// Leases counts the successful acquires by who chose the lease id: the
// client (Lease-Id sent) or the gateway (minted). missing counts the 2xx
// answers to minted acquires that named no lease, a broken contract.
func (s *Summary) Leases() (chosen, minted, missing int) {
	for _, e := range s.Events {
		switch {
		case e.Op != OpAcquire:
		case e.Outcome == Ok && e.Minted:
			minted++
		case e.Outcome == Ok:
			chosen++
		case e.Minted && e.Status/100 == 2:
			missing++
		}
	}
	return chosen, minted, missing
}

// Ops counts events by operation and outcome.
func (s *Summary) Ops() map[Op]map[Outcome]int {
	out := make(map[Op]map[Outcome]int)
	for _, e := range s.Events {
		if out[e.Op] == nil {
			out[e.Op] = make(map[Outcome]int)
		}
		out[e.Op][e.Outcome]++
	}
	return out
}

// Statuses counts HTTP answers by operation and status (0: no answer).
func (s *Summary) Statuses() map[Op]map[int]int {
	out := make(map[Op]map[int]int)
	for _, e := range s.Events {
		if e.Op == OpWrite {
			continue
		}
		if out[e.Op] == nil {
			out[e.Op] = make(map[int]int)
		}
		out[e.Op][e.Status]++
	}
	return out
}

// Unavailable splits the answers 503 (no quorum, or the gateway not ready)
// by whether a fault can explain them: the call overlapped a fault that
// made nodes faulty or stopped gateways, or that fault's recovery bound
// after it healed (Bound, or LossBound after a data loss, whose node is
// quarantined). unexplained lists the others, which a healthy, merely busy
// cluster gave.
func (s *Summary) Unavailable() (explained int, unexplained []Event) {
	for _, e := range s.Events {
		if e.Status != 503 {
			continue
		}
		if s.faultCovers(e) {
			explained++
		} else {
			unexplained = append(unexplained, e)
		}
	}
	return explained, unexplained
}

// faultCovers reports whether a node or gateway fault, or its recovery
// bound, overlaps call e.
func (s *Summary) faultCovers(e Event) bool {
	for _, f := range s.Faults {
		if len(f.Nodes) == 0 && len(f.Gateways) == 0 {
			continue // a client's pause stops no part of the cluster
		}
		bound := s.Bound
		if f.DataLoss {
			bound = s.LossBound
		}
		if f.Start <= e.Complete && e.Invoke <= f.End+bound {
			return true
		}
	}
	return false
}

// NearStall counts the events of es that began within a second of a stall
// of a node (Redis records stalls to the whole second).
func (s *Summary) NearStall(es []Event) int {
	n := 0
	for _, e := range es {
		for _, st := range s.Stalls {
			if st.At-time.Second <= e.Invoke && e.Invoke < st.At+2*time.Second {
				n++
				break
			}
		}
	}
	return n
}

// ServerErrors counts answers 500–599 other than 503, which the gateway
// must never give.
func (s *Summary) ServerErrors() int {
	n := 0
	for _, e := range s.Events {
		if e.Status >= 500 && e.Status != 503 {
			n++
		}
	}
	return n
}

// FaultsByKind counts the faults of each kind and their total time.
func (s *Summary) FaultsByKind() (kinds []string, count map[string]int, total map[string]time.Duration) {
	count, total = make(map[string]int), make(map[string]time.Duration)
	for _, f := range s.Faults {
		if count[f.Kind] == 0 {
			kinds = append(kinds, f.Kind)
		}
		count[f.Kind]++
		total[f.Kind] += f.End - f.Start
	}
	sort.Strings(kinds)
	return kinds, count, total
}

// MaxFaulty returns the most nodes faulty at one moment: a node is faulty
// for the span of a fault that names it and, after losing its data, for
// healGap more.
func MaxFaulty(faults []Fault, healGap time.Duration) int {
	best := 0
	for _, at := range faults {
		nodes := map[int]bool{}
		for _, f := range faults {
			end := f.End
			if f.DataLoss {
				end += healGap
			}
			if f.Start <= at.Start && at.Start < end {
				for _, n := range f.Nodes {
					nodes[n] = true
				}
			}
		}
		best = max(best, len(nodes))
	}
	return best
}

// reportedOps are the operations the log and the report count, in order.
var reportedOps = []Op{OpAcquire, OpExtend, OpRelease, OpForceRelease, OpPermitAcquire, OpPermitExtend,
	OpPermitRelease, OpWrite}

func verdict(v []Violation) string {
	if len(v) == 0 {
		return "none"
	}
	return fmt.Sprintf("**%d violations**", len(v))
}

// Markdown renders the summary as RELIABILITY.md.
func (s *Summary) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Reliability: fault-injection run\n\n")
	p("Written by `LOCKGATE_CHAOS=long go test ./chaos -run 'TestFaults$' -timeout 45m -v` (package `chaos`) from the run\n")
	p("below; every figure is from that run. Started %s, %v of load, seed %d (rerun with `LOCKGATE_CHAOS_SEED=%d`).\n\n",
		s.Started.UTC().Format(time.RFC3339), s.Duration.Round(time.Second), s.Seed, s.Seed)
	p("Topology on loopback: %d redis-server nodes (AOF, `appendfsync everysec`), nodes 3 and 4 behind a fault proxy,\n", s.Nodes)
	p("node 2 reached by each gateway through a link proxy of its own, node 1 through Redis Sentinel (a primary and a replica,\n")
	p("failed over when the nemesis asks); gateways with access control on (a clients' token, an operator's for force releases);\n")
	p("%d lockgate gateway processes; %d clients over 3 hot and 64 cold resources, sending their own `Lease-Id` in half\n", s.Gateways, s.Clients)
	p("the cycles and none (the gateway mints one) in the others; in one cycle of %d a permit of one of two semaphores of\n", permitEvery)
	p("%d permits over HTTP instead, in one of %d a force release of a hot lock by the operator; TTL %v.\n", workloadK, forceEvery, s.TTL)
	p("Data-loss protection: **%s**.\n\n", map[bool]string{false: "on", true: "off (LOCKGATE_UNSAFE_NO_LOSS_PROTECTION=1)"}[s.Unsafe])

	p("## Checkers\n\n| check | property | result |\n|---|---|---|\n")
	p("| C1 | no overlapping grants of a resource in fault-free windows | %s (%d overlaps inside fault windows, reported, not judged) |\n", verdict(s.C1), s.C1Excused)
	p("| C2 | tokens unique per resource; a grant begun after another ended has a higher token | %s |\n", verdict(s.C2))
	p("| C3 | the fenced register never admitted a lower token after a higher one, nor one token for two leases, and lost no acknowledged write | %s |\n", verdict(s.C3))
	p("| C4 | after a fault heals, an acquire succeeds within %v (TTL plus the retry bound), or %v after a node lost its data (plus its quarantine) | %s |\n", s.Bound, s.LossBound, verdict(s.C4))
	p("| C5 | a stale or foreign lease never extended or released another's lock | %s |\n", verdict(s.C5))
	p("| A | answers stay true: a lease's first grant answers 201, a holder's release in time is not 404 | %s |\n", verdict(s.Answers))
	var rejected []string
	for _, r := range s.OutsideModels {
		rejected = append(rejected, fmt.Sprintf("%s: %d operations, %s", r.Model, r.Ops, r.Verdict))
	}
	p("| outside the model | in windows of faults outside lockgate's stated model (a node's clock stepped past the drift allowance): C2, C3, C5 and A violations, and model checks that reject the history until M1 is relaxed there (rule M7); counted, not judged | %d violations; %d model checks%s |\n\n",
		len(s.Outside), len(s.OutsideModels), map[bool]string{true: " (" + strings.Join(rejected, "; ") + ")"}[len(rejected) > 0])
	for _, vs := range [][]Violation{s.C1, s.C2, s.C3, s.C4, s.C5, s.Answers, s.Outside} {
		for i, v := range vs {
			if i == 10 {
				p("- … and %d more %s\n", len(vs)-10, v.Check)
				break
			}
			p("- %s\n", v)
		}
	}
	if len(s.Models) > 0 {
		p("\nModel checks (porcupine, models in `chaos/model`; rules in its doc.go):\n\n| model | operations | verdict | time to check |\n|---|---|---|---|\n")
		for _, r := range s.Models {
			p("| %s | %d | %s | %v |\n", r.Model, r.Ops, r.Verdict, r.Took.Round(time.Millisecond))
		}
	}
	p("\nStale writes refused by the fenced register: **%d**. Gateway answers 5xx other than 503: **%d**.\n\n", s.Refused, s.ServerErrors())
	explained, unexplained := s.Unavailable()
	p("Answers 503: **%d** while a fault, or its recovery bound after it healed, could explain them; **%d** with no fault near",
		explained, len(unexplained))
	if len(unexplained) > 0 {
		p(", of which %d began within a second of a node's stall over 25 ms", s.NearStall(unexplained))
	}
	p(".\n\n")
	if len(s.Stalls) > 0 {
		worst := map[string]time.Duration{}
		count := map[string]int{}
		var kinds []string
		for _, st := range s.Stalls {
			if count[st.Event] == 0 {
				kinds = append(kinds, st.Event)
			}
			count[st.Event]++
			worst[st.Event] = max(worst[st.Event], st.Took)
		}
		slices.Sort(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s ×%d (worst %v)", k, count[k], worst[k]))
		}
		p("Node stalls over 25 ms that Redis recorded (LATENCY HISTORY, read from every node every second): %s.\n\n", strings.Join(parts, ", "))
	}

	if u := s.Unprotected; u != nil {
		p("## With the protection off\n\n")
		p("The two deterministic episodes alone, gateways started with LOCKGATE_UNSAFE_NO_LOSS_PROTECTION=1, seed %d:\n", u.Seed)
		p("C2 %s, C3 %s, C1 overlaps inside fault windows %d.\n\n", verdict(u.C2), verdict(u.C3), u.C1Excused)
		for _, r := range u.Models {
			p("Model %s: %d operations, %s in %v.\n", r.Model, r.Ops, r.Verdict, r.Took.Round(time.Millisecond))
		}
		p("\n")
		for i, v := range u.C2 {
			if i == 4 {
				p("- … and %d more C2\n", len(u.C2)-4)
				break
			}
			p("- %s\n", v)
		}
		p("\n")
	}

	p("## Operations\n\n| operation | ok | fail | unknown | HTTP statuses (0: no answer) |\n|---|---|---|---|---|\n")
	ops, st := s.Ops(), s.Statuses()
	for _, op := range reportedOps {
		var codes []string
		keys := make([]int, 0, len(st[op]))
		for c := range st[op] {
			keys = append(keys, c)
		}
		slices.Sort(keys)
		for _, c := range keys {
			codes = append(codes, fmt.Sprintf("%d×%d", c, st[op][c]))
		}
		p("| %s | %d | %d | %d | %s |\n", op, ops[op][Ok], ops[op][Fail], ops[op][Unknown], strings.Join(codes, " "))
	}
	foreign := 0
	for _, e := range s.Events {
		if e.Foreign {
			foreign++
		}
	}
	chosen, minted, _ := s.Leases()
	p("\nSuccessful acquires by who chose the lease id: the client %d, the gateway (no Lease-Id sent) %d.\n", chosen, minted)
	p("Extends and releases include %d sent on purpose with a released or never-granted lease (C5).\n\n", foreign)

	p("## Faults\n\nAt most %d of %d nodes were faulty at once; nodes that lost their data during the run: %v.\n\n",
		s.MaxFaultyNodes, s.Nodes, s.WipedNodes)
	p("| fault | count | total time | longest stretch without a successful acquire | slowest recovery after heal |\n|---|---|---|---|---|\n")
	kinds, count, total := s.FaultsByKind()
	for _, k := range kinds {
		var longest, recovery time.Duration
		for _, g := range s.Gaps {
			if g.Fault.Kind == k {
				longest = max(longest, g.Longest)
				recovery = max(recovery, g.Recovery)
			}
		}
		p("| %s | %d | %v | %v | %v |\n", k, count[k], total[k].Round(time.Millisecond),
			longest.Round(time.Millisecond), recovery.Round(time.Millisecond))
	}

	p("\n## Redis memory\n\n| node | DBSIZE before | DBSIZE after | used_memory before | used_memory after |\n|---|---|---|---|---|\n")
	for i := range s.MemBefore {
		var after NodeMemory
		if i < len(s.MemAfter) {
			after = s.MemAfter[i]
		}
		p("| %d | %d | %d | %d | %d |\n", i, s.MemBefore[i].Keys, after.Keys, s.MemBefore[i].UsedMemory, after.UsedMemory)
	}
	p("\n\"Before\" is read after the nodes started and before any client ran; \"after\" once every fault was healed\n")
	p("and the clients had stopped.\n\n")

	p("## What is not guaranteed\n\n")
	p("The suite checks the promise of `lockcore/doc.go` under the faults above, never more than two of the five\n")
	p("nodes faulty at once. What it does not cover, and lockgate does not guarantee:\n\n")
	p("- **A majority of the nodes losing data at once.** Nodes that all forgot everything look like a new\n")
	p("  cluster to a gateway that had not seen them: tokens start again. (A gateway that saw them quarantines\n")
	p("  them and repairs them from a floor taken from the clock.)\n")
	p("- **A restore from an older copy that no running gateway saw before.** The heartbeat that reveals it lives\n")
	p("  in the gateways' memory; all replicas restarting together forget it.\n")
	p("- **Nodes that sync less than every write** (`appendfsync everysec`, no persistence): they are quarantined\n")
	p("  after every restart, so they cost availability, not safety; but if more than a minority of them restart\n")
	p("  at once there is no quorum until the quarantine (the largest TTL) has passed.\n")
	p("- **A holder that pauses past its TTL** still acts when it wakes; only storage that checks the fencing\n")
	p("  token (package `fencing`) stops its writes. C1 is checked in fault-free windows only for this reason.\n")
	p("- **Clock assumptions of Redlock:** bounded drift between the gateway and the nodes, bounded against the\n")
	p("  drift allowance (1%% of the TTL + 2 ms). A node's clock stepped forward by more than the allowance\n")
	p("  (an NTP step, a VM resumed) expires its copies of locks early, and a lock whose other copies are gone\n")
	p("  or faulty can be granted again while its holder's validity lasts: lockgate assumes no such step. The\n")
	p("  suite runs on one machine's clock; its clock-drift kind runs one node's clock 0.5%% fast for two TTLs\n")
	p("  (within the allowance); its clock-step kind steps one node's clock %v ahead (%d times the\n", clockStep, int(clockStep/driftAllowance))
	p("  allowance of a 1 s TTL) and back a TTL later. The second is outside the model: its windows are checked like any other,\n")
	p("  but what is found there is counted in the row \"outside the model\" above and fails no test.\n")
	return b.String()
}

// KeptMarker starts the part of RELIABILITY.md that is written by hand
// (the bug table, the model checker's section): a long run rewrites the
// file above it and keeps everything from it on.
const KeptMarker = "<!-- Written by hand from here on; the long run keeps it. -->"

// WithKept is report followed by the hand-written part of old (from
// KeptMarker on), if old has one.
func WithKept(report string, old []byte) string {
	if i := strings.Index(string(old), KeptMarker); i >= 0 {
		return strings.TrimRight(report, "\n") + "\n\n" + string(old[i:])
	}
	return report
}
