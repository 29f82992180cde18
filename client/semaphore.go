package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/api"
)

// Sentinel errors of the semaphores, matched by *ProblemError with
// errors.Is.
var (
	// ErrSemaphoreFull: every permit is held (409 semaphore-full), also
	// when a wait ran out. ProblemError.RetryAfter is the shortest
	// remaining TTL among the holders.
	ErrSemaphoreFull = errors.New("client: every permit is held")
	// ErrPermitsMismatch: a holder's permit records another number of
	// permits than the request's (409 permits-mismatch).
	ErrPermitsMismatch = errors.New("client: semaphore held with another number of permits")
)

// Permit is a permit the gateway granted: the answer to AcquirePermit or
// ExtendPermit, with the local time the request was sent.
type Permit struct {
	api.Permit
	// Sent is when the request that got this answer was sent, on the local
	// monotonic clock.
	Sent time.Time
}

// ValidUntil is the local time until which the permit is known to be
// held (see Lease.ValidUntil).
func (p *Permit) ValidUntil() time.Time {
	return p.Sent.Add(time.Duration(p.ValidityMs) * time.Millisecond)
}

// FenceResource is the name to fence storage by for this permit: tokens
// grow per permit, so a store must keep one fence per permit. It is
// "NAME/I", the permit's name in the gateway, which no lock can have (a
// slash is outside the resource alphabet), so a permit's fence never
// shares a key with a lock's. SetFencingHeaders of a Lock from HoldPermit
// uses it.
func FenceResource(semaphore string, permit int) string {
	return semaphore + "/" + strconv.Itoa(permit)
}

func semaphorePath(name string, rest ...string) (plain, escaped string) {
	plain, escaped = "/semaphores/"+name, "/semaphores/"+url.PathEscape(name)
	for _, r := range rest {
		plain, escaped = plain+"/"+r, escaped+"/"+r
	}
	return plain, escaped
}

// AcquirePermit asks once for one of the permits of the semaphore name
// (PUT /semaphores/{name}/permits), of which there are permits (K),
// waiting up to o.Wait while all are held. o.LeaseID is the permit's
// lease (empty: one is minted): a lease that already holds a permit of
// name gets it back, its TTL reset and its token unchanged, so a request
// whose answer was lost can be sent again with the same o.LeaseID. It
// does not retry; HoldPermit does. Errors:
// *ProblemError (ErrSemaphoreFull with RetryAfter, ErrPermitsMismatch,
// ErrBadRequest with Field, ErrNoQuorum, ErrUnavailable, ErrUnauthorized,
// ErrForbidden), *TLSError, *NoAnswerError, or the context's error.
func (c *Client) AcquirePermit(ctx context.Context, name string, permits int, o *AcquireOptions) (*Permit, error) {
	body := api.SemaphoreAcquireRequest{Permits: permits}
	leaseID := NewLeaseID()
	if o != nil {
		if o.LeaseID != "" {
			leaseID = o.LeaseID
		}
		if o.TTL > 0 {
			body.TTLms = ptr(max(o.TTL.Milliseconds(), 1))
		}
		if o.Wait > 0 {
			body.WaitMs = ptr(max(o.Wait.Milliseconds(), 1))
		}
		if o.Owner != "" {
			body.Owner = &o.Owner
		}
	}
	plain, escaped := semaphorePath(name, "permits")
	return c.permit(ctx, "acquire permit", http.MethodPut, plain, escaped, leaseID, 0, body)
}

// ExtendPermit renews permit of the semaphore name that leaseID holds
// (PATCH), once. Errors: as Extend's.
func (c *Client) ExtendPermit(ctx context.Context, name string, permit int, leaseID string, o *ExtendOptions) (*Permit, error) {
	var eo ExtendOptions
	if o != nil {
		eo = *o
	}
	var body api.ExtendRequest
	if eo.TTL > 0 {
		body.TTLms = ptr(max(eo.TTL.Milliseconds(), 1))
	}
	plain, escaped := semaphorePath(name, "permits", strconv.Itoa(permit))
	return c.permit(ctx, "extend permit", http.MethodPatch, plain, escaped, leaseID, eo.IfToken, body)
}

// ReleasePermit gives permit of the semaphore name back (DELETE), once;
// ifToken, if not 0, is checked as by Extend. Errors: as Release's.
func (c *Client) ReleasePermit(ctx context.Context, name string, permit int, leaseID string, ifToken int64) error {
	plain, escaped := semaphorePath(name, "permits", strconv.Itoa(permit))
	resp, _, err := c.doPath(ctx, "release permit", http.MethodDelete, plain, escaped, leaseID, ifToken, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("lockgate: release permit: unexpected status %d", resp.StatusCode)
	}
	return nil
}

// GetSemaphore returns the semaphore's K and its permits in use (GET),
// never a lease id. Errors: *ProblemError (ErrNotHeld when no permit is
// held, ErrNoQuorum, ErrBadRequest, ErrUnauthorized, ErrForbidden),
// *TLSError, *NoAnswerError, or the context's error.
func (c *Client) GetSemaphore(ctx context.Context, name string) (*api.SemaphoreInfo, error) {
	plain, escaped := semaphorePath(name)
	_, body, err := c.doPath(ctx, "get semaphore", http.MethodGet, plain, escaped, "", 0, nil)
	if err != nil {
		return nil, err
	}
	var info api.SemaphoreInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("lockgate: get semaphore: bad answer: %w", err)
	}
	return &info, nil
}

func (c *Client) permit(ctx context.Context, op, method, plain, escaped, leaseID string, ifToken int64, body any) (*Permit, error) {
	sent := c.now()
	_, raw, err := c.doPath(ctx, op, method, plain, escaped, leaseID, ifToken, body)
	if err != nil {
		return nil, err
	}
	p := &Permit{Sent: sent}
	if err := json.Unmarshal(raw, &p.Permit); err != nil {
		return nil, fmt.Errorf("lockgate: %s: bad answer: %w", op, err)
	}
	if p.LeaseID == "" || p.FencingToken <= 0 || p.ValidityMs <= 0 {
		return nil, fmt.Errorf("lockgate: %s: bad answer: permit without lease id, token or validity", op)
	}
	return p, nil
}

// asLease is the permit as the lease a Lock's watchdog keeps.
func (p *Permit) asLease() *Lease {
	return &Lease{Sent: p.Sent, Lease: api.Lease{Resource: p.Semaphore, LeaseID: p.LeaseID, FencingToken: p.FencingToken,
		TTLms: p.TTLms, ValidityMs: p.ValidityMs, ExpiresAt: p.ExpiresAt}}
}

// HoldPermit takes one of the permits (K) of the semaphore name, waiting
// up to o.Wait, and keeps it with a watchdog as Lock keeps a lock: the
// returned *Lock renews it about every TTL/3, closes Done when it can no
// longer be counted on, and gives it back on Release. Its Permit says
// which permit it is, and SetFencingHeaders fences by that permit
// (FenceResource). As Lock, it retries transient failures with the same
// minted lease id, so a lost answer gets the same permit back rather than
// a second one; if it gives up after such a failure it asks once more,
// without waiting, and gives back what that lease holds. Errors: as
// AcquirePermit's, the last one when retries ran out.
func (c *Client) HoldPermit(ctx context.Context, name string, permits int, o *LockOptions) (*Lock, error) {
	opt := o.withDefaults()
	ao := AcquireOptions{TTL: opt.TTL, Owner: opt.Owner, LeaseID: NewLeaseID()}
	var p *Permit
	unsure, err := c.retryTransient(ctx, opt.Wait, func(wait time.Duration) (err error) {
		ao.Wait = wait
		p, err = c.AcquirePermit(ctx, name, permits, &ao)
		return err
	})
	if err != nil {
		if unsure {
			c.releasePermitQuietly(ctx, name, permits, ao)
		}
		return nil, err
	}
	if c.now().Sub(p.Sent) > time.Duration(p.ValidityMs)*time.Millisecond/3 {
		// A waited acquisition: as in Lock, renew at once so that the
		// validity counts from a moment known here.
		ext, err := c.ExtendPermit(ctx, name, p.Permit.Permit, p.LeaseID, &ExtendOptions{IfToken: p.FencingToken})
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.ReleasePermit(rctx, name, p.Permit.Permit, p.LeaseID, p.FencingToken)
			return nil, err
		}
		ext.Permits = p.Permits
		p = ext
	}
	return c.hold(ctx, name, p.Permit.Permit, false, p.asLease(), nil, opt), nil
}

// releasePermitQuietly gives back the permit ao.LeaseID may hold after a
// lost answer: asked again without a wait, the gateway returns it (or a
// free one, given back too); a full semaphore means the lease holds none.
func (c *Client) releasePermitQuietly(ctx context.Context, name string, permits int, ao AcquireOptions) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ao.Wait = 0
	if p, err := c.AcquirePermit(rctx, name, permits, &ao); err == nil {
		_ = c.ReleasePermit(rctx, name, p.Permit.Permit, p.LeaseID, p.FencingToken)
	}
}

// Permit is the permit's number for a Lock from HoldPermit, -1 for a lock
// or a readers-writer hold.
func (l *Lock) Permit() int { return l.permit }

// fenceResource is what SetFencingHeaders names.
func (l *Lock) fenceResource() string {
	if l.rw {
		return RWFenceResource(l.resource)
	}
	if l.permit < 0 {
		return l.resource
	}
	return FenceResource(l.resource, l.permit)
}

// setMembers is the names of a lock set's members.
func (l *Lock) setMembers() []string {
	out := make([]string, len(l.set))
	for i, m := range l.set {
		out[i] = m.Resource
	}
	return out
}

// extend renews the lock, permit, hold or set once.
func (l *Lock) extend(ctx context.Context, o *ExtendOptions) (*Lease, error) {
	if l.set != nil {
		s, err := l.c.ExtendSet(ctx, l.setMembers(), l.leaseID, o)
		if err != nil {
			return nil, err
		}
		return s.asLease(), nil
	}
	if l.rw {
		h, err := l.c.ExtendRW(ctx, l.resource, l.leaseID, o)
		if err != nil {
			return nil, err
		}
		return h.asLease(), nil
	}
	if l.permit < 0 {
		return l.c.Extend(ctx, l.resource, l.leaseID, o)
	}
	p, err := l.c.ExtendPermit(ctx, l.resource, l.permit, l.leaseID, o)
	if err != nil {
		return nil, err
	}
	return p.asLease(), nil
}

// release gives the lock or permit back once.
func (l *Lock) release(ctx context.Context) error {
	if l.set != nil {
		return l.c.ReleaseSet(ctx, l.setMembers(), l.leaseID)
	}
	if l.rw {
		return l.c.ReleaseRW(ctx, l.resource, l.leaseID)
	}
	if l.permit < 0 {
		return l.c.Release(ctx, l.resource, l.leaseID, l.token)
	}
	return l.c.ReleasePermit(ctx, l.resource, l.permit, l.leaseID, l.token)
}
