package quorum

import "sync/atomic"

// pace is what a Group's calls remember of each node's speed (rule 6), so
// that a node that stays slow does not slow every call by a grace.
//
// Without pace, a cluster with one slow node would pay a grace on every
// call and keep little more than half of a healthy cluster's throughput;
// with it, nearly all. Healthy nodes answer in time and are not behind,
// so a healthy cluster's throughput is the same with or without it.
type pace struct {
	nodes []atomic.Uint64 // paceState by node
	calls atomic.Uint64   // the last call number given
}

// behind reports whether node i is behind.
func (p *pace) behind(i int) bool { return paceState(p.nodes[i].Load()).behind() }

// missed returns how many graces in a row node i missed.
func (p *pace) missed(i int) int { return paceState(p.nodes[i].Load()).missed() }

// judge records that node i answered call seq in time or not, unless a
// newer call was judged for it already.
func (p *pace) judge(i int, seq uint64, inTime bool) {
	for {
		old := p.nodes[i].Load()
		next, ok := paceState(old).judged(seq, inTime)
		if !ok || p.nodes[i].CompareAndSwap(old, uint64(next)) {
			return
		}
	}
}
