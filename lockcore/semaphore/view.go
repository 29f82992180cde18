package semaphore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// view is what one read of permits found: held[i] is permit i's holder, nil
// when free.
type view struct {
	held []*lockcore.LockInfo
}

// manyInspector is implemented by a Locker that reads many locks in one
// round (*lockcore.Redlock over nodes that are lockcore.Listers).
type manyInspector interface {
	InspectMany(ctx context.Context, resources []string) ([]*lockcore.LockInfo, error)
}

// read reads every permit, 0 to lockcore.MaxPermits-1: in one round when
// the Locker can (one node timeout for all 64), else one Inspect per
// permit, readParallel at a time.
func (s *Semaphores) read(ctx context.Context, name string) (view, error) {
	names := make([]string, lockcore.MaxPermits)
	for i := range names {
		names[i] = lockcore.PermitResource(name, i)
	}
	if m, ok := s.locker.(manyInspector); ok {
		held, err := m.InspectMany(ctx, names)
		if !errors.Is(err, lockcore.ErrNotSupported) {
			return view{held: held}, err
		}
	}
	v := view{held: make([]*lockcore.LockInfo, lockcore.MaxPermits)}
	errs := make([]error, lockcore.MaxPermits)
	s.each(lockcore.MaxPermits, func(i int) {
		info, err := s.locker.Inspect(ctx, names[i])
		switch {
		case err == nil:
			v.held[i] = info
		case !errors.Is(err, lockcore.ErrNotHeld):
			errs[i] = err
		}
	})
	for _, err := range errs {
		if err != nil {
			return v, err
		}
	}
	return v, nil
}

// readParallel bounds the calls of one each in flight at once: a
// semaphore's reads, one round per permit when the Locker cannot read
// many at once, must not put a burst of 64 rounds on the nodes.
const readParallel = 16

// each calls fn(0) to fn(n-1), readParallel at a time, and returns when
// all have returned.
func (s *Semaphores) each(n int, fn func(i int)) {
	slots := make(chan struct{}, readParallel)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			fn(i)
		})
	}
	wg.Wait()
}

// conflict returns a *MismatchError for the first holder in v, other than
// permit self, that records another K than k.
func (v view) conflict(name string, k, self int) error {
	for i, info := range v.held {
		if info == nil || i == self {
			continue
		}
		if held, _ := parseOwner(info.Owner); held != k {
			return &MismatchError{Name: name, Asked: k, Held: held, HolderPermit: i}
		}
	}
	return nil
}

// soonest returns the shortest remaining TTL among permits 0 to k-1 in v.
func (v view) soonest(k int) time.Duration {
	var d time.Duration
	for _, info := range v.held[:min(k, len(v.held))] {
		if info != nil && (d == 0 || info.Remaining < d) {
			d = info.Remaining
		}
	}
	return d
}
