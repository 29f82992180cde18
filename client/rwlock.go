package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lockgate/lockgate/api"
)

// Sentinel errors of the readers-writer locks, matched by *ProblemError
// with errors.Is.
var (
	// ErrModeHeld: the lease holds the readers-writer lock in the other
	// mode (409 mode-held): an upgrade from reader to writer, or the
	// reverse, is refused. Release, then acquire in the mode wanted.
	ErrModeHeld = errors.New("client: the lease holds the lock in the other mode")
	// ErrNotSupported: a lock node of the gateway keeps no readers-writer
	// locks (501 not-supported).
	ErrNotSupported = errors.New("client: not supported by the gateway's lock nodes")
)

// RWLease is a reader's or the writer's hold on a readers-writer lock:
// the answer to AcquireRW or ExtendRW, with the local time the request was
// sent.
type RWLease struct {
	api.RWLease
	// Sent is when the request that got this answer was sent, on the local
	// monotonic clock.
	Sent time.Time
}

// ValidUntil is the local time until which the hold is known to be kept
// (see Lease.ValidUntil).
func (h *RWLease) ValidUntil() time.Time {
	return h.Sent.Add(time.Duration(h.ValidityMs) * time.Millisecond)
}

// asLease is the hold as the lease a Lock's watchdog keeps.
func (h *RWLease) asLease() *Lease {
	return &Lease{Sent: h.Sent, Lease: api.Lease{Resource: h.Resource, LeaseID: h.LeaseID, FencingToken: h.FencingToken,
		TTLms: h.TTLms, ValidityMs: h.ValidityMs, ExpiresAt: h.ExpiresAt}}
}

// RWFenceResource is the name to fence storage by for the readers-writer
// lock name: "NAME#rw", which no lock or permit can have ('#' is outside
// the resource alphabet), so its fence never shares a key with the mutex
// of the same name. A writer fences its writes by it; a reader's token is
// compared with the highest writer token a store applied (see
// docs/rwlocks.md). SetFencingHeaders of a Lock from HoldRW uses it.
func RWFenceResource(name string) string { return name + "#rw" }

func rwPath(name string) (plain, escaped string) {
	return "/rwlocks/" + name, "/rwlocks/" + url.PathEscape(name)
}

func rwMode(exclusive bool) string {
	if exclusive {
		return api.ModeExclusive
	}
	return api.ModeShared
}

// AcquireRW asks once for a reader's hold (exclusive false) or the
// writer's hold on the readers-writer lock name (PUT /rwlocks/{name}),
// waiting up to o.Wait while it is held in a conflicting mode; a waiting
// writer keeps new readers out meanwhile. o.LeaseID is the hold's lease
// (empty: one is minted): a lease that already holds in the mode asked
// gets its hold back, its TTL reset and its token unchanged. It does not
// retry; HoldRW does. Errors: *ProblemError (ErrTaken with RetryAfter,
// ErrModeHeld, ErrNotSupported, ErrBadRequest with Field, ErrNoQuorum,
// ErrUnavailable, ErrUnauthorized, ErrForbidden), *TLSError,
// *NoAnswerError, or the context's error.
func (c *Client) AcquireRW(ctx context.Context, name string, exclusive bool, o *AcquireOptions) (*RWLease, error) {
	mode := rwMode(exclusive)
	body := api.RWAcquireRequest{Mode: &mode}
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
	return c.rwLease(ctx, "acquire rw", http.MethodPut, name, leaseID, body)
}

// ExtendRW renews the hold leaseID has on the readers-writer lock name
// (PATCH), once; o.TTL as for Extend (o.IfToken is not used: a hold's
// token never changes). Errors: as Extend's.
func (c *Client) ExtendRW(ctx context.Context, name, leaseID string, o *ExtendOptions) (*RWLease, error) {
	var body api.ExtendRequest
	if o != nil && o.TTL > 0 {
		body.TTLms = ptr(max(o.TTL.Milliseconds(), 1))
	}
	return c.rwLease(ctx, "extend rw", http.MethodPatch, name, leaseID, body)
}

// ReleaseRW releases the hold leaseID has on the readers-writer lock name
// (DELETE), once. Errors: as Release's.
func (c *Client) ReleaseRW(ctx context.Context, name, leaseID string) error {
	plain, escaped := rwPath(name)
	resp, _, err := c.doPath(ctx, "release rw", http.MethodDelete, plain, escaped, leaseID, 0, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("lockgate: release rw: unexpected status %d", resp.StatusCode)
	}
	return nil
}

// GetRWLock returns who holds the readers-writer lock name (GET): its
// mode, its readers or its writer (never lease ids), and whether a writer
// waits. Errors: *ProblemError (ErrNotHeld when nothing holds it,
// ErrNoQuorum, ErrBadRequest, ErrUnauthorized, ErrForbidden), *TLSError,
// *NoAnswerError, or the context's error.
func (c *Client) GetRWLock(ctx context.Context, name string) (*api.RWLockInfo, error) {
	plain, escaped := rwPath(name)
	_, body, err := c.doPath(ctx, "get rw", http.MethodGet, plain, escaped, "", 0, nil)
	if err != nil {
		return nil, err
	}
	var info api.RWLockInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("lockgate: get rw: bad answer: %w", err)
	}
	return &info, nil
}

func (c *Client) rwLease(ctx context.Context, op, method, name, leaseID string, body any) (*RWLease, error) {
	plain, escaped := rwPath(name)
	sent := c.now()
	_, raw, err := c.doPath(ctx, op, method, plain, escaped, leaseID, 0, body)
	if err != nil {
		return nil, err
	}
	h := &RWLease{Sent: sent}
	if err := json.Unmarshal(raw, &h.RWLease); err != nil {
		return nil, fmt.Errorf("lockgate: %s: bad answer: %w", op, err)
	}
	if h.LeaseID == "" || h.FencingToken <= 0 || h.ValidityMs <= 0 {
		return nil, fmt.Errorf("lockgate: %s: bad answer: hold without lease id, token or validity", op)
	}
	return h, nil
}

// HoldRW takes a reader's hold (exclusive false) or the writer's hold on
// the readers-writer lock name, waiting up to o.Wait, and keeps it with a
// watchdog as Lock keeps a lock: the returned *Lock renews it about every
// TTL/3, closes Done when it can no longer be counted on, and releases it
// on Release; SetFencingHeaders fences by RWFenceResource(name). As Lock,
// it retries transient failures with the same minted lease id, and if it
// gives up after one it releases what that lease may hold. Errors: as
// AcquireRW's, the last one when retries ran out.
func (c *Client) HoldRW(ctx context.Context, name string, exclusive bool, o *LockOptions) (*Lock, error) {
	opt := o.withDefaults()
	ao := AcquireOptions{TTL: opt.TTL, Owner: opt.Owner, LeaseID: NewLeaseID()}
	var h *RWLease
	unsure, err := c.retryTransient(ctx, opt.Wait, func(wait time.Duration) (err error) {
		ao.Wait = wait
		h, err = c.AcquireRW(ctx, name, exclusive, &ao)
		return err
	})
	if err == nil && c.now().Sub(h.Sent) > time.Duration(h.ValidityMs)*time.Millisecond/3 {
		// A waited acquisition: as in Lock, renew at once so that the
		// validity counts from a moment known here.
		var ext *RWLease
		ext, err = c.ExtendRW(ctx, name, h.LeaseID, nil)
		if err == nil {
			ext.Mode = h.Mode
			h = ext
		}
		unsure = true
	}
	if err != nil {
		if unsure {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.ReleaseRW(rctx, name, ao.LeaseID)
		}
		return nil, err
	}
	return c.hold(ctx, name, -1, true, h.asLease(), nil, opt), nil
}
