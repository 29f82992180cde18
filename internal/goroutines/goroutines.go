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
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, state) && strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
