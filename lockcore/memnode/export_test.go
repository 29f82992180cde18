package memnode

// Stored returns how many locks n keeps in its map, its name index and its
// expiry heap, expired ones included.
func Stored(n *Node) (locks, names, expiry int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for e := n.names.head.next[0]; e != nil; e = e.next[0] {
		names++
	}
	return len(n.locks), names, len(n.expiry)
}
