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
// every node that is a Watcher at once and returns once each has answered.
//
// It succeeds only when subscriptions are in place on at least
// len(nodes) - Quorum() + 1 nodes: every lock held on a quorum is then held
// on one of them, so every release of a held lock is announced by at least
// one subscribed node. A subscription whose connection is lost and made
// again calls notify (see Watcher), so a release missed meanwhile is read
// then. notify must not block.
//
// Errors: *InvalidError for a bad resource name; ErrNotAnnounced, joined
// with the nodes' errors, when fewer nodes were subscribed (the
// subscriptions made are stopped).
func (r *Redlock) WatchReleases(ctx context.Context, resource string, notify func()) (stop func(), err error) {
	return r.watchNodes(ctx, resource, notify, func(n Node) watchFunc {
		if w, ok := n.(Watcher); ok {
			return w.Watch
		}
		return nil
	})
}

// WatchAcquisitions calls notify when a node announces a grant of
// resource (see AcquireWatcher), until stop is called, as WatchReleases
// does for releases: once per node that grants, and sometimes when
// nothing happened. It succeeds only when subscriptions are in place on at
// least len(nodes) - Quorum() + 1 nodes: an acquisition is granted on a
// quorum, so every acquisition that succeeded, and every hand-off, is
// announced by at least one of them. notify must not block.
//
// Errors: *InvalidError for a bad resource name; ErrNotAnnounced, joined
// with the nodes' errors, when fewer nodes were subscribed (the
// subscriptions made are stopped), for example when the nodes are not
// AcquireWatchers.
func (r *Redlock) WatchAcquisitions(ctx context.Context, resource string, notify func()) (stop func(), err error) {
	return r.watchNodes(ctx, resource, notify, func(n Node) watchFunc {
		if w, ok := n.(AcquireWatcher); ok {
			return w.WatchAcquired
		}
		return nil
	})
}

// watchFunc subscribes to one node's announcements of one kind.
type watchFunc func(ctx context.Context, resource string, notify func()) (stop func(), err error)

// watchNodes subscribes with each node's watchFunc (nil: the node does not
// announce) at once, and keeps the subscriptions when at least
// len(nodes) - quorum + 1 are in place (see WatchReleases).
func (r *Redlock) watchNodes(ctx context.Context, resource string, notify func(), watchOf func(Node) watchFunc) (func(), error) {
	if err := r.checkResource(resource); err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		stops []func()
		errs  []error
		wg    sync.WaitGroup
	)
	for _, n := range r.nodes {
		w := watchOf(n)
		if w == nil {
			continue
		}
		wg.Go(func() {
			s, err := w(ctx, resource, notify)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			stops = append(stops, s)
		})
	}
	wg.Wait()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	if len(stops) < len(r.nodes)-r.quorum+1 {
		stopAll()
		return nil, errors.Join(append([]error{ErrNotAnnounced}, errs...)...)
	}
	return stopAll, nil
}
