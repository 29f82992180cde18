// Package api is the wire contract of lockgate's HTTP API: the request and
// response bodies of openapi.yaml, its problem types and its header names, for
// the gateway's handlers and for Go clients. It has no behaviour.
package api

import "time"

// Header names of the contract.
const (
	HeaderLeaseID      = "Lease-Id"
	HeaderFencingToken = "Fencing-Token"
	HeaderRetryAfter   = "Retry-After"
	HeaderIfMatch      = "If-Match"
	HeaderETag         = "ETag"
)

// Media types.
const (
	MediaJSON    = "application/json"
	MediaProblem = "application/problem+json"
)

// DefaultTTLms is the TTL of a PUT without ttl_ms, unless the server is
// configured otherwise.
const DefaultTTLms = 30000

// AcquireRequest is the optional body of PUT /locks/{resource}. Absent fields
// take their defaults: ttl_ms the gateway's default TTL, wait_ms 0, owner "".
//
// The validate tags of the request bodies hold only what openapi.yaml cannot
// state (an owner is printable): the gateway checks the document's rules
// (types, ranges, lengths, unknown fields) with the document itself, before
// the body is decoded, and lockcore the server's configured bounds (see
// handlers/contract.go).
type AcquireRequest struct {
	TTLms  *int64  `json:"ttl_ms,omitempty"`
	WaitMs *int64  `json:"wait_ms,omitempty"`
	Owner  *string `json:"owner,omitempty" validate:"omitempty,printable"`
}

// ExtendRequest is the optional body of PATCH /locks/{resource}. Without
// ttl_ms the lock is extended by the TTL it was taken with.
type ExtendRequest struct {
	TTLms *int64 `json:"ttl_ms,omitempty"`
}

// Lease is the body of 201 and 200 answers to PUT and PATCH.
type Lease struct {
	Resource     string `json:"resource"`
	LeaseID      string `json:"lease_id"`
	FencingToken int64  `json:"fencing_token"`
	TTLms        int64  `json:"ttl_ms"`
	// ValidityMs is how long the lock is known to be held, counted from
	// when the client sent its request: TTL minus time spent minus drift.
	ValidityMs int64     `json:"validity_ms"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// LockInfo is the body of GET /locks/{resource}. It never has the lease id.
type LockInfo struct {
	Resource     string    `json:"resource"`
	FencingToken int64     `json:"fencing_token"`
	Owner        string    `json:"owner"`
	TTLms        int64     `json:"ttl_ms"`
	ExpiresAt    time.Time `json:"expires_at"`
	// GrantedAt is when the lock was granted or last extended, on the
	// gateway's clock. ExpiresAt is early by the clock-drift allowance;
	// GrantedAt is not moved by it: the time held is now - GrantedAt,
	// not TTLms less the time left. Nil (absent) where the answer does
	// not know it (a watch's answer).
	GrantedAt *time.Time `json:"granted_at,omitempty"`
}

// LockList is the body of GET /locks: a page of held locks, never with
// their lease ids. NextCursor, absent on the last page, asks for the next.
type LockList struct {
	Locks      []LockInfo `json:"locks"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// Health is the body of /livez, /healthz and /readyz.
type Health struct {
	Status string `json:"status"`
	// Nodes says, in a 200 of /readyz, what each lock node is doing, as
	// in its 503 (Problem.Nodes): a node may be unreachable, and since
	// when, while a quorum still serves. Absent from /livez and /healthz.
	Nodes []NodeState `json:"nodes,omitempty"`
}

// Problem is an RFC 9457 problem details body with lockgate's extension
// members.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Field names the request field at fault (400).
	Field string `json:"field,omitempty"`
	// RetryAfterMs is the holder's remaining TTL (409) or a suggested wait.
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
	// Limit names the limit a too-many-waiters problem (429) hit: "caller"
	// (the caller's share of the replica's waiters) or "replica" (the
	// replica's waiters, all callers together).
	Limit string `json:"limit,omitempty"`
	// Nodes says, in a 503 of /readyz, what each lock node is doing (in
	// the order of the gateway's -redis list; their addresses are not
	// given).
	Nodes []NodeState `json:"nodes,omitempty"`
}

// NodeState is one lock node's state in an answer of /readyz.
type NodeState struct {
	// State is serving, unreachable, refusing, lost, quarantined or
	// uninitialized.
	State string `json:"state"`
	// Reason says why a node does not serve (which rule found a loss, why
	// it refuses, how its quarantine ends; for an unreachable node, what
	// its check met, "its check failed: connection refused", in words that
	// hold no address: see lockcore.Cause).
	Reason string `json:"reason,omitempty"`
	// Since is when the gateway found the node in this state.
	Since *time.Time `json:"since,omitempty"`
	// Until is when the node is expected to serve again, when known.
	Until *time.Time `json:"until,omitempty"`
}

// Problem types: the "type" member of each problem lockgate answers with.
const (
	ProblemInvalid          = "urn:lockgate:problem:invalid-request"
	ProblemTooLarge         = "urn:lockgate:problem:body-too-large"
	ProblemMediaType        = "urn:lockgate:problem:unsupported-media-type"
	ProblemTaken            = "urn:lockgate:problem:lock-taken"
	ProblemHeldByOther      = "urn:lockgate:problem:held-by-another-lease"
	ProblemNotHeld          = "urn:lockgate:problem:lock-not-held"
	ProblemTokenMismatch    = "urn:lockgate:problem:fencing-token-mismatch"
	ProblemNoQuorum         = "urn:lockgate:problem:no-quorum"
	ProblemTooManyWaiters   = "urn:lockgate:problem:too-many-waiters"
	ProblemShuttingDown     = "urn:lockgate:problem:shutting-down"
	ProblemNotFound         = "urn:lockgate:problem:not-found"
	ProblemMethodNotAllowed = "urn:lockgate:problem:method-not-allowed"
	ProblemUnauthorized     = "urn:lockgate:problem:unauthorized"
	ProblemForbidden        = "urn:lockgate:problem:forbidden"
	ProblemInternal         = "urn:lockgate:problem:internal"
	ProblemRateLimited      = "urn:lockgate:problem:rate-limited"
	// ProblemNotSupported (501): a lock node of the gateway lacks what
	// the operation needs (a node kind that keeps no readers-writer
	// locks).
	ProblemNotSupported = "urn:lockgate:problem:not-supported"
)
