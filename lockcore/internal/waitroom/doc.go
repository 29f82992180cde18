// Package waitroom is a Redlock replica's waiting room: the Acquire calls
// that wait for a held lock queue per resource, in arrival order, and only
// the head of a queue is served.
//
// # What it needs, what it is told
//
// The room knows nothing of nodes or leases beyond what it is given. It
// needs from the lock algorithm: Request.Try (one acquisition round, whose
// Result says whether the wait is over, when the holder's lock runs out and
// whether the vote split), Request.Refresh (whether a retried lease already
// holds the lock), Config.Watches (subscriptions to the nodes' release
// announcements) and Config.Abandon (release a lease nobody will use). It is
// told: Announce (these nodes released the lock), Yield (a waiter on
// another replica wants it), Claim and Deliver (a Release hands the lock to
// the head), Close.
//
// # States
//
// Each waiter is in one state:
//
//	state       meaning                                   left by
//	queued      behind the head                           the head leaving: head
//	head        at the front, waiting for a reason to try decide says attempt: attempting;
//	                                                      Claim: claimed; Close, deadline: gone
//	attempting  its own acquisition round under way       Result not done: head;
//	                                                      done: served
//	claimed     a Release is handing the lock to it       Deliver ok: handed;
//	                                                      Deliver failed: head; deadline: gone
//	handed      a hand-off gave it a lease                decide says take: served
//	served      its wait is over; it is leaving           leaving: gone
//	gone        out of the queue                          (a lease delivered now is abandoned)
//
// # When a waiter acts
//
// One function, decide, turns a waiter's state, its queue's and the time
// into the next action; the loop in serve only carries it out. In order:
//
//	handed                                       take the lease (even past the deadline)
//	room closed                                  shut
//	deadline reached                             give up (the holder's time left as hint)
//	queued or claimed                            sleep until the deadline
//	nothing due                                  sleep until the earliest of the deadline,
//	                                             retryAt and the next resubscription
//	due, but yielding to another replica         sleep until the yield ends
//	due, resubscription due                      resubscribe, then decide again (and try)
//	due                                          attempt
//
// The head is due to try when
//   - the lock may be free: a quorum of nodes was announced free since its
//     last attempt began (by this replica's Release, which knows which nodes
//     released, or by the nodes themselves, which announce each release in
//     the same atomic step as they delete the lock), or it was woken (it is
//     a new queue's first waiter, the head before it left without the lock,
//     or a failed hand-off to it freed nodes) — unless its last attempt was
//     a split vote, when it waits for retryAt;
//   - retryAt came: the holder's TTL, learnt from the failed attempt, ran
//     out (an expiry is announced by nobody), or the pause after a split
//     vote ended (2 ms, doubling with each split in a row, with jitter);
//   - the queue lacks a subscription and the once-a-second retry is due (a
//     queue that may miss announcements polls), or it just resubscribed.
//
// Only which nodes announced a release counts, not which release: undos of
// split votes add up (each frees a minority; together they free the lock),
// while the undo of the head's own attempt on a minority the holder never
// got frees only that minority and wakes nobody.
//
// # Joining, hand-offs, other replicas
//
// A request that finds no queue for its resource tries once before joining,
// unless the replica yields; one that finds a queue joins its tail without
// trying, so that the releaser of a lock others wait for cannot take it
// back ahead of them. One that joins without trying asks Request.Refresh
// first (its lease may hold the lock already). A queue subscribes on every Watcher node when its
// first waiter joins, before that waiter's first attempt in the queue, so a
// release between the failed try and the subscription is not missed; the
// subscriptions end when the queue empties.
//
// A Release through this replica claims the head when it is idle (head)
// and hands it the lock; the head does not try meanwhile, and Deliver ends
// the claim. A head that left meanwhile has the lease abandoned.
//
// Across replicas there is no queue: each replica's head tries on the same
// announcement, and whichever reaches a majority first wins. A node refuses
// to hand on a lock that a waiter through another replica was refused; the
// releasing replica then yields for YieldFor: its head does not try, and a
// new request joins instead of trying first, so two busy replicas tend to
// alternate.
//
// Every time the room reads or waits for is on Config.Clock, so a fake
// clock drives waits completely.
package waitroom
