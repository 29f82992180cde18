package lockcore

import (
	"context"
	"errors"
)

// AcquireWatcher is implemented by nodes that announce grants, so that a
// watcher of a lock on another gateway replica learns of a new holder at
// once instead of reading the lock again and again (package watch).
type AcquireWatcher interface {
	// WatchAcquired calls notify once for every grant of resource on this
	// node (an Acquire that returned StatusGranted, or a HandOff that passed
	// the lock on), until stop is called. A re-entry (StatusReentered), a
	// refused acquisition and a lock taken in by AdoptLocks are not
	// announced. notify may also be called when no grant happened (e.g.
	// after a lost connection, in case one was missed). It returns only
	// once the subscription is in place, so a grant that happens after
	// WatchAcquired returns is never missed. notify must not block. The
	// announcement carries no lease id.
	WatchAcquired(ctx context.Context, resource string, notify func()) (stop func(), err error)
}

// ErrNotAnnounced is what WatchReleases and WatchAcquisitions fail with
// when too few nodes announce (or could be subscribed to) for every change
// made on a quorum to be heard: the caller must read the lock again on its
// own schedule.
var ErrNotAnnounced = errors.New("lockcore: too few nodes announce changes for every change to be heard")
