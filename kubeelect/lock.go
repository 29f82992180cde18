// Package kubeelect is a client-go leader-election lock
// (k8s.io/client-go/tools/leaderelection/resourcelock.Interface) held in
// lockgate instead of a Kubernetes Lease, so that a controller using
// client-go's leaderelection gets a fencing token with its leadership.
//
// Kubernetes' own leader election has no fencing (kubernetes#44887): a
// leader that stalls past its lease keeps acting as leader until it
// notices, while another has taken over. Here the leadership is a
// lockgate lock named after the election; its fencing token is the term
// (Lock.Term), higher for every new leader. A controller passes the term
// with every write to a store that checks it (package fencing), and the
// store refuses a deposed leader's writes whatever its clock says.
// Example_controller (example_test.go) is such a controller under
// leaderelection.RunOrDie: it reads the term when its leadership begins
// and sends it with every write of that leadership.
//
// The lock needs no Kubernetes API server: lockgate is the lock. It is a
// module of its own, so that client-go never becomes a dependency of the
// gateway.
//
// Mapping. Get reads the lock (GET /locks/{name}): the holder's owner label
// is the record's HolderIdentity, its TTL the LeaseDurationSeconds, and
// its expiry less its TTL the RenewTime; a free lock is NotFound. Create,
// and Update by a candidate that does not hold the lock, acquire it
// without waiting (the gateway refuses while another holds it); Update by
// the holder extends it; Update with no HolderIdentity (ReleaseOnCancel)
// releases it. The TTL is the record's LeaseDurationSeconds.
package kubeelect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/lockgate/lockgate/client"
)

// Lock is one candidate's lock of one election. It implements
// resourcelock.Interface. Use one Lock per candidate process (its lease id
// is its own).
type Lock struct {
	c        *client.Client
	name     string
	identity string
	leaseID  string
	recorder resourcelock.EventRecorder

	mu   sync.Mutex
	term int64 // the fencing token while this candidate holds the lock, else 0
}

var _ resourcelock.Interface = (*Lock)(nil)

// New returns the lock of the election name (a lockgate resource name)
// for the candidate identity (its owner label; unique per candidate).
// recorder, if not nil, receives the elector's events.
func New(c *client.Client, name, identity string, recorder resourcelock.EventRecorder) *Lock {
	return &Lock{c: c, name: name, identity: identity, leaseID: client.NewLeaseID(), recorder: recorder}
}

// Term is the fencing token of this candidate's leadership, 0 while it
// does not lead. A later leader's term is higher: pass it with every write
// to a fenced store.
func (l *Lock) Term() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

// Get returns the election's record: the holder's owner label, TTL and last
// renewal. Errors: a NotFound API error when nobody holds the lock (the
// elector then calls Create), or the client's.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	info, err := l.c.Get(ctx, l.name)
	if errors.Is(err, client.ErrNotHeld) {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: "lockgate", Resource: "locks"}, l.name)
	}
	if err != nil {
		return nil, nil, err
	}
	ttl := time.Duration(info.TTLms) * time.Millisecond
	rec := &resourcelock.LeaderElectionRecord{
		HolderIdentity:       info.Owner,
		LeaseDurationSeconds: int(max(ttl/time.Second, 1)),
		RenewTime:            metav1.NewTime(info.ExpiresAt.Add(-ttl)),
	}
	raw, err := json.Marshal(struct {
		*resourcelock.LeaderElectionRecord
		Token int64 `json:"token"`
	}{rec, info.FencingToken})
	return rec, raw, err
}

// Create takes the lock for ler.HolderIdentity (this candidate) without
// waiting. Errors: the client's (client.ErrTaken while another holds it).
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.acquire(ctx, ler)
}

// Update renews the lock while this candidate holds it, takes it
// otherwise, and releases it for a record without a holder. Errors: the
// client's; after one that says the lock is lost (not held, held by
// another), Term is 0 until the lock is taken again.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	term := l.term
	l.mu.Unlock()
	switch {
	case ler.HolderIdentity == "":
		l.setTerm(0)
		err := l.c.Release(ctx, l.name, l.leaseID, term)
		if errors.Is(err, client.ErrNotHeld) || errors.Is(err, client.ErrHeldByOther) {
			return nil
		}
		return err
	case ler.HolderIdentity != l.identity:
		return fmt.Errorf("kubeelect: %s cannot make %s the holder", l.identity, ler.HolderIdentity)
	case term == 0:
		return l.acquire(ctx, ler)
	}
	_, err := l.c.Extend(ctx, l.name, l.leaseID, &client.ExtendOptions{TTL: leaseDuration(ler), IfToken: term})
	if errors.Is(err, client.ErrNotHeld) || errors.Is(err, client.ErrHeldByOther) || errors.Is(err, client.ErrTokenMismatch) {
		l.setTerm(0) // lost: another holds it, or nobody
	}
	return err
}

func (l *Lock) acquire(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("kubeelect: %s cannot make %s the holder", l.identity, ler.HolderIdentity)
	}
	lease, err := l.c.Acquire(ctx, l.name, &client.AcquireOptions{TTL: leaseDuration(ler), Owner: l.identity, LeaseID: l.leaseID})
	if err != nil {
		return err
	}
	l.setTerm(lease.FencingToken)
	return nil
}

func (l *Lock) setTerm(t int64) {
	l.mu.Lock()
	l.term = t
	l.mu.Unlock()
}

// leaseDuration is the record's lease duration, at least a second.
func leaseDuration(ler resourcelock.LeaderElectionRecord) time.Duration {
	return time.Duration(max(ler.LeaseDurationSeconds, 1)) * time.Second
}

// RecordEvent passes the elector's event to the recorder, if any.
func (l *Lock) RecordEvent(s string) {
	if l.recorder != nil {
		l.recorder.Eventf(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: l.name}}, "Normal", "LeaderElection", "%s %s", l.identity, s)
	}
}

// Identity is the candidate's identity (its owner label).
func (l *Lock) Identity() string { return l.identity }

// Describe names the election: lockgate/{name}.
func (l *Lock) Describe() string { return "lockgate/" + l.name }
