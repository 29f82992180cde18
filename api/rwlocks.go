package api

import "time"

// Modes of a readers-writer lock's hold.
const (
	// ModeShared is a reader's hold: any number at once, never beside a
	// writer.
	ModeShared = "shared"
	// ModeExclusive is the writer's hold: one at a time, alone.
	ModeExclusive = "exclusive"
)

// RWAcquireRequest is the body of PUT /rwlocks/{name}. Mode is "shared"
// (a reader) or "exclusive" (the writer), default exclusive; absent fields
// take the defaults of AcquireRequest.
type RWAcquireRequest struct {
	Mode   *string `json:"mode,omitempty" validate:"omitempty,oneof=shared exclusive"`
	TTLms  *int64  `json:"ttl_ms,omitempty"`
	WaitMs *int64  `json:"wait_ms,omitempty"`
	Owner  *string `json:"owner,omitempty" validate:"omitempty,printable"`
}

// RWLease is the body of 201 and 200 answers to PUT and PATCH on
// /rwlocks/{name}: a held hold with its lease id (a secret) and its
// fencing token. A writer's token is above every earlier holder's; a
// reader's is above every earlier writer's and below every later one's.
type RWLease struct {
	Resource string `json:"resource"`
	// Mode is the hold's mode, in the answer to PUT (absent in PATCH's).
	Mode         string    `json:"mode,omitempty"`
	LeaseID      string    `json:"lease_id"`
	FencingToken int64     `json:"fencing_token"`
	TTLms        int64     `json:"ttl_ms"`
	ValidityMs   int64     `json:"validity_ms"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// RWLockInfo is the body of GET /rwlocks/{name}: the mode it is held in,
// every holder (never their lease ids), and whether a writer waits (new
// readers are then refused).
type RWLockInfo struct {
	Resource      string     `json:"resource"`
	Mode          string     `json:"mode"`
	Holders       []RWHolder `json:"holders"`
	WriterWaiting bool       `json:"writer_waiting"`
}

// RWHolder is one holder of an RWLockInfo.
type RWHolder struct {
	Mode         string    `json:"mode"`
	FencingToken int64     `json:"fencing_token"`
	Owner        string    `json:"owner"`
	TTLms        int64     `json:"ttl_ms"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// ProblemModeHeld (409 on PUT /rwlocks/{name}): the lease holds the lock
// in the other mode; an upgrade from reader to writer (or a downgrade) is
// refused. Release, then acquire in the mode wanted.
const ProblemModeHeld = "urn:lockgate:problem:mode-held"
