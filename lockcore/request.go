package lockcore

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Resource string
	// LeaseID is the caller's secret for this lease. Empty: a new one is
	// minted (192 bits from crypto/rand). If the lease already holds the
	// lock, Acquire refreshes its TTL and returns its token (an idempotent
	// retry).
	LeaseID string
	TTL     time.Duration
	// Wait is how long to wait for a lock held by another lease; 0 fails at
	// once with *TakenError.
	Wait time.Duration
	// Owner is a free label shown by Inspect.
	Owner string
}

// Waits reports whether the request may wait for a held lock.
func (req AcquireRequest) Waits() bool { return req.Wait > 0 }

// Lease is a held lock.
type Lease struct {
	Resource string
	ID       string // the lease id: a secret, never log it
	Token    int64  // the fencing token
	TTL      time.Duration
	// Validity is how long the lock is known to be held from the moment the
	// answer was produced: TTL minus the time spent minus clock drift; at
	// least MinValidity.
	Validity time.Duration
	// Expires is Now()+Validity on the Redlock's clock.
	Expires time.Time
	// Reentered is true when the lease already held the lock (an idempotent
	// retry) and false for a new holder.
	Reentered bool
	Owner     string

	minted bool // the lease id was minted for this acquisition
}

// ExtendRequest extends a held lock.
type ExtendRequest struct {
	Resource string
	LeaseID  string
	TTL      time.Duration // 0: the TTL the lock was last set with
	// IfToken non-zero: fail with ErrTokenMismatch, changing nothing, unless
	// the lock's token is this; checked by each node in the same step as the
	// extend (see Redlock.Extend).
	IfToken int64
}

// ReleaseRequest releases a held lock.
type ReleaseRequest struct {
	Resource string
	LeaseID  string
	// IfToken non-zero: fail with ErrTokenMismatch, changing nothing, unless
	// the lock's token is this; checked by each node in the same step as the
	// release or hand-off (see Redlock.Release).
	IfToken int64
}

// LockInfo describes who holds a lock, without the lease id.
type LockInfo struct {
	Resource string
	Token    int64
	Owner    string
	TTL      time.Duration
	// Remaining is the lock's validity left: its TTL less the time it has
	// run and less the clock-drift allowance, so Expires is early by that
	// allowance, never late.
	Remaining time.Duration
	Expires   time.Time
	// Granted is when the lock was granted or last extended, on the
	// gateway's clock: now less the time its TTL has run on the nodes (the
	// quorum-th node to expire it). No drift allowance enters it, so the
	// time it has been held, now - Granted, is not overstated by one, as
	// TTL - Remaining is.
	Granted time.Time
}

// nameBytes and leaseBytes mark the bytes a resource name and a lease id
// may hold. They are checked by a loop over a table rather than a regular
// expression: every request checks both, and a regexp match costs a
// visible share of a request's CPU time.
var nameBytes, leaseBytes = func() (name, lease [256]bool) {
	for c := range 256 {
		alnum := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		lease[c] = alnum || c == '_' || c == '-'
		name[c] = lease[c] || c == '.' || c == ':'
	}
	return name, lease
}()

// only reports whether s is minLen to maxLen bytes, each allowed by ok.
func only(s string, minLen, maxLen int, ok *[256]bool) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := range len(s) {
		if !ok[s[i]] {
			return false
		}
	}
	return true
}

// ValidResource reports whether name is a valid resource name: 1 to 200
// characters of A-Z a-z 0-9 . _ - :
func ValidResource(name string) bool { return only(name, 1, 200, &nameBytes) }

// ValidLeaseID reports whether id is a valid lease id: 16 to 128 characters
// of A-Z a-z 0-9 - _
func ValidLeaseID(id string) bool { return only(id, 16, 128, &leaseBytes) }

// ValidOwner reports whether owner is a valid label: at most 256 printable
// characters.
func ValidOwner(owner string) bool {
	n := 0
	for _, c := range owner {
		n++
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == 0xfffd {
			return false
		}
	}
	return n <= 256
}

// NewLeaseID returns a fresh lease id: 192 bits from crypto/rand, base64url.
func NewLeaseID() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (Go ≥1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// PermitSep joins a semaphore's name and a permit's number into the
// resource name of the permit's lock ("jobs/2", see PermitResource). It
// lies outside the resource alphabet, so a permit's lock never shares its
// name with a lock that ValidResource accepts, and List never shows it.
const PermitSep = '/'

// MaxPermits bounds a semaphore's number of permits.
const MaxPermits = 64

// PermitResource returns the resource name of the lock that is permit i of
// the semaphore name (a valid resource name, 0 <= i < MaxPermits).
// Acquire, Extend, Release, Inspect and ForceRelease accept it; it is no
// valid resource name for ValidResource, so it cannot collide with a lock.
func PermitResource(name string, i int) string {
	return name + string(PermitSep) + strconv.Itoa(i)
}

// validPermit reports whether name is a PermitResource name.
func validPermit(name string) bool {
	base, num, ok := strings.Cut(name, string(PermitSep))
	if !ok || !ValidResource(base) || num == "" || len(num) > 2 || (len(num) > 1 && num[0] == '0') {
		return false
	}
	for j := range len(num) {
		if num[j] < '0' || num[j] > '9' {
			return false // only the canonical form: "x/+1" must not alias "x/1"
		}
	}
	i, _ := strconv.Atoi(num)
	return i < MaxPermits
}

func (r *Redlock) checkResource(name string) error {
	if !ValidResource(name) && !validPermit(name) {
		return &InvalidError{Field: "resource", Reason: "must be 1 to 200 characters of A-Z a-z 0-9 . _ - :"}
	}
	return nil
}

func checkLease(id string) error {
	if !ValidLeaseID(id) {
		return &InvalidError{Field: "lease_id", Reason: "must be 16 to 128 characters of A-Z a-z 0-9 - _"}
	}
	return nil
}

func (r *Redlock) checkTTL(ttl time.Duration) error {
	if ttl < r.opt.MinTTL || ttl > r.opt.MaxTTL {
		return &InvalidError{Field: "ttl_ms", Reason: fmt.Sprintf("must be between %d and %d", r.opt.MinTTL.Milliseconds(), r.opt.MaxTTL.Milliseconds())}
	}
	return nil
}

// checkRequest checks the fields that Acquire, Extend and Release share, in
// one order (resource, lease id, TTL) so that each names the same field
// first. The lease id must be valid, but may be empty with mayMint (Acquire
// mints one). The TTL must lie within the bounds, but may be 0 with
// mayKeepTTL (Extend keeps the TTL last set) and is not looked at with noTTL
// (Release has none).
func (r *Redlock) checkRequest(resource, lease string, ttl time.Duration, relax checkFlags) error {
	if err := r.checkResource(resource); err != nil {
		return err
	}
	if lease != "" || relax&mayMint == 0 {
		if err := checkLease(lease); err != nil {
			return err
		}
	}
	if relax&noTTL == 0 && (ttl != 0 || relax&mayKeepTTL == 0) {
		return r.checkTTL(ttl)
	}
	return nil
}

// checkFlags relax checkRequest.
type checkFlags int

const (
	mayMint    checkFlags = 1 << iota // an empty lease id is accepted
	mayKeepTTL                        // TTL 0 is accepted
	noTTL                             // the TTL is not checked
)
