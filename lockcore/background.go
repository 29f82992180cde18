package lockcore

import (
	"sync"
)

// background counts the goroutines a Redlock leaves running after a call
// returns (see Redlock.spawn): the rounds whose late answers are still
// being acted on (see quorum.Config.Spawn) and the fencing catch-ups (see
// catchUp). Each ends by its
// node calls' NodeTimeout. Close waits for them, and tests (export_test.go)
// before they read the nodes: a round decided at a quorum may leave a
// node's call under way.
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while nobody waits
}

func (b *background) add() {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

func (b *background) done() {
	b.mu.Lock()
	if b.n--; b.n == 0 && b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
}

// wait returns once nothing counted runs any longer: each ends by its
// calls' deadlines.
func (b *background) wait() {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	<-idle
}
