// Package goroutines lets tests see what other goroutines are doing, from a
// dump of every goroutine's stack, so that a test can wait until a goroutine
// has reached a given point instead of sleeping for a guessed time.
package goroutines

import (
	"runtime"
	"strings"
)

// Count returns how many goroutines are in state, as a stack dump shows it
// (" [select", " [chan receive", …), and have fn in their stack, as a dump
// spells it ("pkg_test.waitingAcquire(", "pkg.(*Node).Watch("). Both are
// matched as substrings of one goroutine's dump, which is read in full
// however many goroutines there are. The count is a snapshot: it may change
// as soon as Count returns.
func Count(state, fn string) int {
	_, n := count(state, fn)
	return n
}

// Except returns how many goroutines are not counted by Count(state, fn),
// from the same dump: a test's baseline that leaves out goroutines kept by
// design.
func Except(state, fn string) int {
	all, n := count(state, fn)
	return all - n
}

// count returns how many goroutines one dump shows, and how many of them
// are in state and have fn in their stack.
func count(state, fn string) (all, matched int) {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		all++
		if strings.Contains(g, state) && strings.Contains(g, fn) {
			matched++
		}
	}
	return all, matched
}
