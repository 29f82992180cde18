package lockcore

import (
	"context"
	"errors"
	"sync"
)

// WatchReleases calls notify when a node announces a release of resource
// (see Watcher), until stop is called: once per node that announces it, so
// a release held by a quorum is announced several times, and notify may
// also be called when nothing happened (see Watcher). It subscribes on
// every node that is a Watcher at once and returns once each has answered:
// with no error when at least one subscription is in place, or when no
// node is a Watcher (notify is then never called and the caller must read
// again on its own schedule). A release on a node whose subscription
// failed is not announced; a lock is released on a quorum, so one
// subscription is enough to hear of every release that succeeded. notify
// must not block.
//
// Errors: *InvalidError for a bad resource name; otherwise the nodes'
// errors joined, when every subscription failed.
func (r *Redlock) WatchReleases(ctx context.Context, resource string, notify func()) (stop func(), err error) {
	if err := r.checkResource(resource); err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		stops []func()
		errs  []error
		wg    sync.WaitGroup
	)
	watchers := 0
	for _, n := range r.nodes {
		w, ok := n.(Watcher)
		if !ok {
			continue
		}
		watchers++
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := w.Watch(ctx, resource, notify)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			stops = append(stops, s)
		}()
	}
	wg.Wait()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	if watchers > 0 && len(stops) == 0 {
		return nil, errors.Join(errs...)
	}
	return stopAll, nil
}
