package api

import "time"

// SetSep separates the members of a lock set in its path,
// /locksets/{a,b,c}: a character outside the resource alphabet.
const SetSep = ","

// LockSet is the body of 201 and 200 answers to PUT and PATCH on
// /locksets/{members}: the set's lease id (a secret), its TTL and
// validity, and each member's fencing token, in the canonical order
// (members sorted by name).
type LockSet struct {
	// Resources is the set's canonical name: its members sorted and
	// joined by commas, the path of its Location.
	Resources  string          `json:"resources"`
	LeaseID    string          `json:"lease_id"`
	TTLms      int64           `json:"ttl_ms"`
	ValidityMs int64           `json:"validity_ms"`
	ExpiresAt  time.Time       `json:"expires_at"`
	Members    []LockSetMember `json:"members"`
}

// LockSetMember is one member of a held LockSet with its fencing token.
type LockSetMember struct {
	Resource     string `json:"resource"`
	FencingToken int64  `json:"fencing_token"`
}

// LockSetInfo is the body of GET /locksets/{members}: who holds each
// member (never lease ids), in the canonical order. A member no lease
// holds has held false and nothing else.
type LockSetInfo struct {
	Resources string              `json:"resources"`
	Members   []LockSetMemberInfo `json:"members"`
}

// LockSetMemberInfo is one member of a LockSetInfo.
type LockSetMemberInfo struct {
	Resource     string     `json:"resource"`
	Held         bool       `json:"held"`
	FencingToken int64      `json:"fencing_token,omitempty"`
	Owner        *string    `json:"owner,omitempty"`
	TTLms        int64      `json:"ttl_ms,omitempty"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
}
