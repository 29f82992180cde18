package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lockgate/lockgate/api"
)

// SetLease is a held lock set: the answer to AcquireSet or ExtendSet, with
// the local time the request was sent.
type SetLease struct {
	api.LockSet
	// Sent is when the request that got this answer was sent, on the local
	// monotonic clock.
	Sent time.Time
}

// ValidUntil is the local time until which every member is known to be
// held (see Lease.ValidUntil).
func (s *SetLease) ValidUntil() time.Time {
	return s.Sent.Add(time.Duration(s.ValidityMs) * time.Millisecond)
}

// Token returns member's fencing token, or 0 when it is no member.
func (s *SetLease) Token(member string) int64 {
	for _, m := range s.Members {
		if m.Resource == member {
			return m.FencingToken
		}
	}
	return 0
}

// asLease is the set as the lease a Lock's watchdog keeps: its validity
// and lease id (a set has no one token).
func (s *SetLease) asLease() *Lease {
	return &Lease{Sent: s.Sent, Lease: api.Lease{Resource: s.Resources, LeaseID: s.LeaseID,
		TTLms: s.TTLms, ValidityMs: s.ValidityMs, ExpiresAt: s.ExpiresAt}}
}

// setPath is the path of the lock set of members: /locksets/a,b,c.
func setPath(members []string) (plain, escaped string) {
	esc := make([]string, len(members))
	for i, m := range members {
		esc[i] = url.PathEscape(m)
	}
	return "/locksets/" + strings.Join(members, api.SetSep), "/locksets/" + strings.Join(esc, api.SetSep)
}

// AcquireSet asks once for every member of a lock set, all or none (PUT
// /locksets/{members}), waiting up to o.Wait in all for members other
// leases hold. The members (1 to 64, none twice) may come in any order;
// the answer lists them sorted, each with its fencing token, under one
// lease id (o.LeaseID, or one minted). A lease that already holds every
// member gets them back, TTLs reset, tokens unchanged. When a member
// cannot be had, the gateway releases what it took before answering:
// nothing is left held. It does not retry; HoldSet does. Errors:
// *ProblemError (ErrTaken with RetryAfter, its detail naming the member;
// ErrBadRequest with Field, ErrNoQuorum, ErrUnavailable, ErrUnauthorized,
// ErrForbidden), *TLSError, *NoAnswerError, or the context's error.
func (c *Client) AcquireSet(ctx context.Context, members []string, o *AcquireOptions) (*SetLease, error) {
	var body api.AcquireRequest
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
	return c.setLease(ctx, "acquire set", http.MethodPut, members, leaseID, body)
}

// ExtendSet renews every member leaseID holds (PATCH), once; o.TTL as for
// Extend (o.IfToken is not used). When a member is no longer held, the
// gateway releases the others and answers ErrNotHeld naming it. Errors: as
// Extend's.
func (c *Client) ExtendSet(ctx context.Context, members []string, leaseID string, o *ExtendOptions) (*SetLease, error) {
	var body api.ExtendRequest
	if o != nil && o.TTL > 0 {
		body.TTLms = ptr(max(o.TTL.Milliseconds(), 1))
	}
	return c.setLease(ctx, "extend set", http.MethodPatch, members, leaseID, body)
}

// ReleaseSet releases every member leaseID holds (DELETE), once. Errors:
// as Release's (ErrNotHeld when the lease held no member).
func (c *Client) ReleaseSet(ctx context.Context, members []string, leaseID string) error {
	plain, escaped := setPath(members)
	resp, _, err := c.doPath(ctx, "release set", http.MethodDelete, plain, escaped, leaseID, 0, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("lockgate: release set: unexpected status %d", resp.StatusCode)
	}
	return nil
}

// GetSet returns who holds each member of a set (GET), sorted, never
// lease ids. Errors: *ProblemError (ErrNotHeld when no member is held,
// ErrNoQuorum, ErrBadRequest, ErrUnauthorized, ErrForbidden), *TLSError,
// *NoAnswerError, or the context's error.
func (c *Client) GetSet(ctx context.Context, members []string) (*api.LockSetInfo, error) {
	plain, escaped := setPath(members)
	_, body, err := c.doPath(ctx, "get set", http.MethodGet, plain, escaped, "", 0, nil)
	if err != nil {
		return nil, err
	}
	var info api.LockSetInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("lockgate: get set: bad answer: %w", err)
	}
	return &info, nil
}

func (c *Client) setLease(ctx context.Context, op, method string, members []string, leaseID string, body any) (*SetLease, error) {
	plain, escaped := setPath(members)
	sent := c.now()
	_, raw, err := c.doPath(ctx, op, method, plain, escaped, leaseID, 0, body)
	if err != nil {
		return nil, err
	}
	s := &SetLease{Sent: sent}
	if err := json.Unmarshal(raw, &s.LockSet); err != nil {
		return nil, fmt.Errorf("lockgate: %s: bad answer: %w", op, err)
	}
	if s.LeaseID == "" || s.ValidityMs <= 0 || len(s.Members) == 0 {
		return nil, fmt.Errorf("lockgate: %s: bad answer: set without lease id, validity or members", op)
	}
	for _, m := range s.Members {
		if m.FencingToken <= 0 {
			return nil, fmt.Errorf("lockgate: %s: bad answer: member %s without a fencing token", op, m.Resource)
		}
	}
	return s, nil
}

// HoldSet takes every member of a lock set, all or none, waiting up to
// o.Wait, and keeps the set with a watchdog as Lock keeps a lock: the
// returned *Lock renews every member about every TTL/3 (one PATCH), closes
// Done when the set can no longer be counted on (a member lost loses the
// set), and releases every member on Release. Its Resource is the set's
// name (the members sorted, joined by commas) and Members their tokens;
// FencingToken is 0 and SetFencingHeaders sets nothing: fence each
// member's storage with SetFencingHeaders(req, member, token). As Lock, it
// retries transient failures with the same minted lease id, and if it
// gives up after one it releases what that lease may hold. Errors: as
// AcquireSet's, the last one when retries ran out.
func (c *Client) HoldSet(ctx context.Context, members []string, o *LockOptions) (*Lock, error) {
	opt := o.withDefaults()
	ao := AcquireOptions{TTL: opt.TTL, Owner: opt.Owner, LeaseID: NewLeaseID()}
	var s *SetLease
	unsure, err := c.retryTransient(ctx, opt.Wait, func(wait time.Duration) (err error) {
		ao.Wait = wait
		s, err = c.AcquireSet(ctx, members, &ao)
		return err
	})
	if err == nil && c.now().Sub(s.Sent) > time.Duration(s.ValidityMs)*time.Millisecond/3 {
		// A waited acquisition: as in Lock, renew at once so that the
		// validity counts from a moment known here.
		var ext *SetLease
		ext, err = c.ExtendSet(ctx, members, s.LeaseID, nil)
		if err == nil {
			s = ext
		}
		unsure = true
	}
	if err != nil {
		if unsure {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.ReleaseSet(rctx, members, ao.LeaseID)
		}
		return nil, err
	}
	return c.hold(ctx, s.Resources, -1, false, s.asLease(), s.Members, opt), nil
}

// Members returns the members of a lock set held by HoldSet, sorted, each
// with its fencing token; nil for any other Lock.
func (l *Lock) Members() []api.LockSetMember { return l.set }
