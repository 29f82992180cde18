package api

import "time"

// SemaphoreAcquireRequest is the body of PUT /semaphores/{name}/permits.
// Permits (K) is required: it is part of the semaphore's contract, and a K
// other than the holders' is refused with ProblemPermitsMismatch. Absent
// fields take the defaults of AcquireRequest.
type SemaphoreAcquireRequest struct {
	Permits int     `json:"permits"`
	TTLms   *int64  `json:"ttl_ms,omitempty"`
	WaitMs  *int64  `json:"wait_ms,omitempty"`
	Owner   *string `json:"owner,omitempty" validate:"omitempty,printable"`
}

// Permit is the body of 201 and 200 answers to PUT and PATCH on a
// semaphore's permits: a held permit with its lease id (a secret) and its
// fencing token, which grows per permit.
type Permit struct {
	Semaphore string `json:"semaphore"`
	// Permit is which permit is held, 0 to Permits-1: its URL is
	// /semaphores/{semaphore}/permits/{permit}.
	Permit int `json:"permit"`
	// Permits is K, in the answer to PUT (absent in PATCH's).
	Permits      int       `json:"permits,omitempty"`
	LeaseID      string    `json:"lease_id"`
	FencingToken int64     `json:"fencing_token"`
	TTLms        int64     `json:"ttl_ms"`
	ValidityMs   int64     `json:"validity_ms"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// SemaphoreInfo is the body of GET /semaphores/{name}: K (the largest a
// holder records), the permits in use and every holder, never their lease
// ids.
type SemaphoreInfo struct {
	Semaphore string         `json:"semaphore"`
	Permits   int            `json:"permits"`
	InUse     int            `json:"in_use"`
	Holders   []PermitHolder `json:"holders"`
}

// PermitHolder is one held permit of a SemaphoreInfo.
type PermitHolder struct {
	Permit       int       `json:"permit"`
	FencingToken int64     `json:"fencing_token"`
	Owner        string    `json:"owner"`
	TTLms        int64     `json:"ttl_ms"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// Problem types of the semaphores.
const (
	// ProblemPermitsMismatch (409): a holder's permit records another
	// number of permits than the request's.
	ProblemPermitsMismatch = "urn:lockgate:problem:permits-mismatch"
	// ProblemSemaphoreFull (409): every permit is held; retry_after_ms is
	// the shortest remaining TTL among the holders.
	ProblemSemaphoreFull = "urn:lockgate:problem:semaphore-full"
)
