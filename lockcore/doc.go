// Package lockcore is lockgate's domain: named locks with fencing tokens,
// granted by the Redlock algorithm over N independent nodes.
//
// # What a lock is
//
// A lock on a resource is held by a lease: a secret lease id, a TTL after which
// the lock frees itself, and a fencing token. Nodes (Redis masters, or the
// in-memory node used when no Redis is configured) each keep their own copy of
// the lock; a lease holds the lock while a majority of nodes (N/2+1) hold it
// for that lease. This package knows nothing of HTTP or Redis: nodes are
// adapters behind the small Node interface (see packages redisnode and
// memnode).
//
// # Redlock
//
// Acquire sends the node's acquire script to every node in parallel, each call
// bounded by Options.NodeTimeout (far below any TTL). It succeeds when a
// majority granted the lock and the validity left is positive:
//
//	validity = TTL − time spent acquiring − drift,  drift = TTL×DriftFactor + 2 ms
//
// Time spent is measured on Go's monotonic clock. When acquiring fails, every
// node that may have granted the lock to this attempt is released at once, so a
// failed attempt does not block others until its TTL runs out. Extend needs a
// majority within the new validity as well. Release is sent to every node.
//
// When this replica has a waiter for the resource, Release hands the lock
// over instead (HandOffer): each node releases the lock and grants it to the
// waiter in one atomic step, incrementing its counter as an acquisition
// does (steps 1 to 3 below apply unchanged), and once every node has
// answered, the grants are counted like an acquisition begun when the
// hand-off began.
//
// # Fencing tokens
//
// Every successful acquisition returns a fencing token: a positive integer
// below 2^53 that is strictly greater than the token of any acquisition of the
// same resource that completed before this one started, whichever gateway
// replica served either and across gateway restarts. Each node keeps a
// counter per resource that never expires. The argument:
//
//  1. The acquire script (and the hand-off script) increments the node's
//     counter in the same atomic step that sets the lock, and returns the
//     new value.
//  2. The token t is the largest value returned by the granting nodes.
//  3. Before answering, the gateway makes sure a majority of nodes hold a
//     counter ≥ t: nodes that returned t already do; the others are raised with
//     a set-if-greater script. When a majority of the granting nodes already
//     returned t, no second round trip is needed.
//  4. A later acquisition is granted by a majority too. Any two majorities of
//     the same N nodes share at least one node, and that node's counter is
//     already ≥ t, so its increment returns > t, and the later token, the
//     maximum over its granting nodes, is > t.
//
// A per-node counter with INCR alone is not enough: counters on different
// nodes drift apart (a node misses grants while it is down or slow), and the
// maximum one majority returns can be below what another majority handed out
// before. Step 3 is what closes that gap.
//
// # What is not guaranteed
//
// A lock with a TTL is advisory. A holder can pause (GC, swapping, a slow
// network) past its TTL while another client acquires; nothing in any lock
// service stops the paused holder from acting afterwards. Redlock also
// assumes bounded clock drift between nodes and that a node does not restart
// with an empty data set while a lock it granted is still live (run nodes with
// AOF and appendfsync always, or keep a restarted node out for longer than
// the largest TTL). If a node loses its counters (a restart without
// persistence, FLUSHALL, eviction) a later token can repeat an earlier one;
// use noeviction and persistence on every node.
//
// The real safety is the fencing token checked by the storage that the lock
// protects: storage that admits a write only when its token is at least the
// highest it has seen rejects the paused holder. Package fencing does that.
package lockcore
