package watch

import "sync"

// sink is where subscriptions deliver: one channel, closed once with the
// reason. A prefix subscription's resources share one.
type sink struct {
	mu    sync.Mutex
	ch    chan Event
	ended bool
	err   error
}

func newSink(n int) *sink { return &sink{ch: make(chan Event, n)} }

// put delivers ev; when the buffer is full it ends the sink as a slow
// reader instead. It reports whether ev was delivered, and whether this
// call ended the sink.
func (k *sink) put(ev Event) (ok, dropped bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ended {
		return false, false
	}
	select {
	case k.ch <- ev:
		return true, false
	default:
		k.ended, k.err = true, ErrSlowReader
		close(k.ch)
		return false, true
	}
}

// end closes the sink with err, unless it has ended.
func (k *sink) end(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ended {
		k.ended, k.err = true, err
		close(k.ch)
	}
}

func (k *sink) reason() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}
