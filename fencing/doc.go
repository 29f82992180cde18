// Package fencing lets a storage service refuse writes from lock holders
// whose lock has already passed to someone else.
//
// A lock service such as lockgate hands every new holder of a resource a
// fencing token: a positive integer below 2^53 that is larger than the token
// of every earlier holder of that resource. A client that stalls (a GC pause,
// a stopped VM, a slow network) can outlive its lease and keep writing after
// the next holder has started. Expiry cannot prevent that; only the storage
// can, by remembering the highest token it has seen for the resource and
// refusing anything lower. This package is that check.
//
// # What is guaranteed
//
// A Guard admits a token for a resource if and only if the token is greater
// than or equal to the highest token it has admitted for that resource, and
// records it in the same atomic step. Equal tokens are admitted because one
// holder usually writes many times under a single grant; a lower token is
// refused with a *StaleTokenError, which matches ErrStaleToken. Tokens
// outside 1..MaxToken are refused with ErrInvalidToken before anything is
// recorded. Once a resource has admitted a token it never admits a lower one
// again, for as long as the guard's state survives.
//
// # What is not guaranteed
//
// Tokens order grants, not work. A token says "this grant came after those
// ones"; it says nothing about when the holder's write will arrive, whether
// the holder still holds the lock, or whether two holders' work overlapped.
// Fencing turns "two holders at once" into "the older one's late writes are
// refused", and nothing more: a stale holder's write that reached the store
// before the newer holder's first write is accepted, because at that moment
// nothing newer had been seen.
//
// Fencing only works if the check and the write are one atomic step in the
// storage (a compare-and-set). If a service calls Admit and then writes its
// data in a separate step, a newer holder can be admitted and write in
// between, and the older holder's write then lands on top of it. So:
//
//   - fencing.Memory, redisfence and pgfence offer Put, which checks the
//     token and writes the value in one step (a mutex, one Lua script, one
//     SQL statement);
//   - pgfence.Guard.Admit run inside the caller's own PostgreSQL transaction
//     holds a row lock on the resource's fence until commit, so the caller's
//     writes in that transaction commit atomically with the check;
//   - the HTTP Middleware only parses and validates tokens unless it is given
//     a Guard, and even then its Admit is a separate step from the handler's
//     write: the handler must still write through Put (see Middleware).
//
// The guard's memory of the highest token is state that must never be lost,
// expired or evicted: if it goes back, stale writes get in again. Keep fence
// rows and keys without TTLs, in durable storage.
//
// # Layout
//
// This package holds the types, the in-memory guard and the net/http
// middleware, and imports nothing outside the standard library. The Redis
// guard lives in fencing/redisfence (go-redis v9), the PostgreSQL guard in
// fencing/pgfence (pgx v5), and fencing/fencingtest holds a conformance
// suite that any guard can be run against.
package fencing
