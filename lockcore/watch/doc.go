// Package watch tells watchers when a lock's holder changes, without their
// polling: the stream of a resource's acquisitions, releases, expiries and
// force releases, and the long poll that waits for the holder's token to
// differ from one the caller knows. It knows nothing of HTTP (package
// handlers adapts it) nor of Redis (it reads through Source, a
// *lockcore.Redlock).
//
// # How a replica learns of changes
//
// A Hub keeps one tracker per watched resource, however many watch it. A
// tracker subscribes to the nodes' announcements of releases
// (lockcore.Watcher, the ones the waiting room uses) and of grants
// (lockcore.AcquireWatcher: an acquisition of a free lock and a hand-off),
// from every replica, and reads the lock (Inspect, a quorum read) when:
//
//   - a node announces a release or a grant, or its subscription's
//     connection was lost and made again (a change may have been missed);
//   - this replica changed the lock (Hub.Changed, called by the handlers);
//   - the holder's TTL as last read runs out (expiries are never announced,
//     nor are extensions: a lock its holder keeps extending is read once
//     per TTL).
//
// With both subscriptions in place nothing else is read: an idle watched
// lock costs no read and no timer but its TTL's. A subscription is in
// place only when enough nodes announce (len(nodes) - quorum + 1, so that
// every change made on a quorum is announced by one of them); while one is
// missing (too few nodes announce, or could be subscribed to), the tracker
// reads every Options.Poll as well, tries to subscribe again at each read,
// and reads again shortly after finding the lock free after a release (a
// waiter usually takes it).
//
// What is not announced: a fencing token raised on a held lock (repair and
// a lagging node's catch-up) and locks taken in by a recovering node; a
// read for another reason shows them.
//
// Each read goes through decide, a pure function from the last state and
// the read to the events (its table is in its doc comment). So a watcher
// sees states the replica read, in token order, never a token lower than
// one it saw; a holder that came and went between two reads of this
// replica is not reported. Tokens still tell what was missed: they grow
// by at least one per holder.
//
// # Prefixes
//
// A PrefixSubscription lists its prefix (Lister) every Options.Poll, and
// at once when this replica takes a lock under it (Changed), follows each
// lock it finds held as a Subscription of its own into one shared buffer,
// and lets one go when a listing no longer has it and its tracker last
// read it free (checked in one step with leaving, so no event falls in
// between). A lock under the prefix that it does not follow yet is found
// by a listing, not by an announcement (the nodes announce per resource):
// an idle prefix subscription costs one listing per Options.Poll.
//
// # Bounds
//
// Subscriptions are bounded per Hub (Options.MaxWatchers,
// ErrTooManyWatchers); each has a buffer of Options.Buffer events, and a
// subscription that lets it fill is dropped (ErrSlowReader) rather than
// buffered without bound. A tracker stops when its last subscription
// leaves. No event carries a lease id.
//
// # After a restart
//
// A subscription starts with a State event read from the nodes, so a
// watcher that reconnects to any replica, or to one that restarted, starts
// from the current holder.
package watch
