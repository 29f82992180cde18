// Package unprotected is the test-only switch that turns off lockgate's
// protection against nodes that lose their data (see lockcore's package
// doc, "Nodes that lose their data"), for the tests that show what the
// protection prevents: with it off they must see the faults it stops.
//
// The switch is no field of a production Options, no flag and no script
// argument: it is a method that takes a Key, a type that only packages of
// this module can name (the package is internal), so no node from outside
// the module can turn the protection off. The gateway reads it only when
// built with the lockgate_unprotected tag (see cmd/lockgate).
package unprotected

// Key is the argument of the switch's methods. Outside this module no code
// can name it, and so no code can call them or implement Node.
type Key struct{}

// Node is implemented by nodes that can run with the protection off
// (redisnode.Node, and wrappers that embed one). A lockcore.Redlock all of
// whose nodes report true neither initializes, quarantines nor repairs
// them, and raises no lagging counter in the background: the behaviour
// before the protection existed.
type Node interface {
	Unprotected(Key) bool
}

// All reports whether every node in nodes is a Node with the protection
// off.
func All[N any](nodes []N) bool {
	for _, n := range nodes {
		u, ok := any(n).(Node)
		if !ok || !u.Unprotected(Key{}) {
			return false
		}
	}
	return len(nodes) > 0
}
