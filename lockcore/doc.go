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
// Acquire sends an acquisition to every node in parallel, each call bounded
// by Options.NodeTimeout (far below any TTL). It succeeds when a
// majority granted the lock and the validity left is positive:
//
//	validity = TTL − time spent acquiring − drift,  drift = TTL×DriftFactor + 2 ms
//
// Time spent is measured on Go's monotonic clock. When acquiring fails, every
// node that may have granted the lock to this attempt is released at once, so a
// failed attempt does not block others until its TTL runs out. Extend needs a
// majority within the new validity as well. Release is sent to every node.
//
// A call is answered once a majority has settled it (see answerAtQuorum in
// round.go, and package internal/quorum for the rules): acquisitions, hand-offs, extends,
// releases, fencing write-backs and inspections that a majority of the
// nodes heard so far grant or confirm do not wait for the others beyond a
// grace period, until the call has taken twice as long as it had when a
// quorum answered (at least 0.5 ms more; healthy nodes answer within it),
// so a slow or hung minority does not slow them. A node that missed the
// grace of two calls in a row gets none until it answers a call in time
// again (rule 6 of internal/quorum), so a node that stays slow costs the graces
// of the calls under way until then, not one per call. Failures wait for every node (up to NodeTimeout), since
// the kind of failure depends on every answer; so does an extend or
// release that a node refused for another token (If-Match), and an
// acquisition in which a node says the lease re-entered, unless the lease
// is known to have held nothing before (see mayHold). The calls still
// under way run on, detached from the caller, and their answers are acted
// on when they come:
//   - an acquisition's or hand-off's late grant with a lower token, or a
//     node that did not answer, is raised to the token given (as in step
//     3); for a lease id the gateway minted, a late grant with a higher
//     token gives its copy back, since that token was never given to anyone
//     and every copy of a lease must carry the token its holder was given,
//     and a late grant to an attempt that failed after all, or to a lease
//     released meanwhile, is released. A lease id the client chose may be
//     in use by a retry through another replica at the same time, so such a
//     copy is left to expire with its TTL, as a node that did not answer is.
//     Its token may be above the one the client was given: an Extend with
//     If-Match that a quorum did under the client's token answers that
//     token (the copy is extended without the check, see checked), so the
//     holder's next If-Match still matches. Without If-Match an Extend
//     answers, and fences, the highest token its quorum holds;
//   - an extend's late node is raised to the token answered, as above;
//   - a release's late node is announced to the waiting room, as the nodes
//     heard are; one that never answers keeps its copy until its TTL runs
//     out, as it would if the release had waited for it and failed.
//
// When this replica has a waiter for the resource, Release hands the lock
// over instead (HandOffer): each node releases the lock and grants it to the
// waiter in one atomic step, incrementing its counter as an acquisition
// does (steps 1 to 3 below apply unchanged), and the grants are counted
// like an acquisition begun when the hand-off began.
//
// # Fencing tokens
//
// Every successful acquisition returns a fencing token: a positive integer
// below 2^53 that is strictly greater than the token of any acquisition of the
// same resource that completed before this one started, whichever gateway
// replica served either and across gateway restarts. Tokens grow; they are
// not dense.
//
// Each node keeps one counter per slot (FenceSlots = 16384, the Redis Cluster
// slots; FenceSlot maps a resource to its slot), not per resource: all
// resources of a slot share its counter, so a node's memory is what its held
// locks take plus a constant (the 16384 counters), however many names were
// ever locked. A resource's lock and its slot's counter live in one Cluster
// slot. The argument, per slot:
//
//  1. A node's acquisition (and its hand-off) increments the node's
//     counter in the same atomic step that sets the lock, and returns the
//     new value.
//  2. The token t is the largest value returned by the granting nodes heard
//     before answering (a node heard later is handled as said above, and
//     never changes t).
//  3. Before answering with a token, whether to an acquisition, a hand-off
//     or an extend (a lease can come to hold a quorum without a fenced grant:
//     an attempt whose answers were lost leaves its copies, and the token
//     they store is then answered by an extend), the gateway makes sure a
//     majority of nodes hold a counter ≥ t: nodes that returned t already do; the others are raised with
//     a set-if-greater script. When a majority of the granting nodes already
//     returned t, no second round trip is needed, and the nodes that answered
//     lower, or did not answer, are raised in the background (catch-up), so
//     that no node stays behind for good.
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
// # Nodes that lose their data
//
// Step 4 needs the shared node to still have its counter. A node that
// restarts empty, or from an older copy of its data, breaks that: measured on
// three nodes, one node lagging and another restarting empty was enough for a
// token to go back from 8 to 4, and for a second holder to get the first
// one's token while it still held the lock (see redisnode's dataloss tests,
// which run both with the protection below turned off). The same node can
// also grant a lock it had already granted to a live holder. So a node that
// lost data must count for nothing until it is repaired:
//
//  5. Detection, by the node's own record. A node serves only while a
//     record in its own data names the server process it was last
//     recovered or initialized for (Redis: its run id, which every new
//     process draws anew, and its replication id, which a process draws
//     anew when it is promoted after being a replica). A restart, a
//     restore from an older copy, a replica promoted behind the node's
//     address (the record was replicated from the old primary), a primary
//     failed over and back (the same process, promoted again, maybe
//     without what the other primary took meanwhile), another node's data
//     files, a flush: each leaves a process or replication history that
//     the record does not name, or no record, and every gateway's check
//     finds that, whether it watched the node for hours or started a
//     second ago (Node.Check is a function of what the node holds and
//     which process answers, nothing else). A loss is never forgotten:
//     the record stays wrong until a recovery rewrites it, however many
//     quarantines fail. A lock script that finds its slot's counter
//     missing changes nothing and fails with ErrQuarantined, and a
//     gateway's connection that finds a process (or replication history)
//     other than the one its last check found makes it stop using the
//     node until its next check. A node whose maxmemory-policy may evict
//     keys does not serve, and loses its record, so it recovers before it
//     serves again. A node whose record is whole but one of whose slot
//     counters is gone (deleted by hand) refuses that slot's locks; the
//     first lock operation that meets the refusal has the guard read the
//     node's counters (at most every 10 s), and a missing one quarantines
//     the node, which then recovers like any other.
//  6. Quarantine. A node found lost is quarantined (Node.Quarantine): every
//     lock operation on it fails with ErrQuarantined and changes nothing,
//     for every gateway, since the mark is kept on the node, per slot. The
//     quarantine names the process it was begun for: a copy of a
//     quarantined node loaded by another process is quarantined anew.
//  7. Recovery, from the other nodes. A quarantined node is recovered at
//     once when recoverNeed = n − quorum + 1 other nodes are in service
//     (with 3 nodes both others, with 5 three of the other four; one node
//     alone never): the guard reads every lock they hold and every slot's
//     counter, the node takes in the locks (Adopter: a lock held for one
//     lease on any of them is held for it, with its remaining TTL; two
//     leases on one name hold it for neither until both would have
//     expired) and raises its counters to the maximum (Node.Repair), and
//     only then is its record rewritten for its process. Why enough: a
//     lock that holds a quorum, or a token fenced on a quorum, is on at
//     least quorum − 1 nodes other than the lost one; the other nodes
//     number n − 1, so any n − quorum + 1 of them include one of those.
//     Locks granted while the node is out are granted without it, on a
//     quorum of the others. With fewer nodes to read, the quarantine lasts
//     longer than any lock the node held can have lived on (MaxTTL, its
//     drift allowance and a node timeout, on the node's own clock); then
//     its counters are raised to the maximum of the other nodes in service
//     (and to the clock floor below when fewer than recoverNeed answer).
//     Since quorum ≥ n − quorum + 1, a node can wait out a quarantine only
//     while fewer than a quorum of the other nodes are in service: only
//     when the cluster could not serve anyway.
//
// Safety therefore comes from the other nodes, not from each node's disk: a
// node that lost the tail of its writes (appendfsync everysec, or no AOF
// at all) recovers as an empty one does. What a node's persistence still
// buys is availability: a majority that restarts at once has nobody to
// recover from and waits out the quarantine.
//
// Why this is enough: call S(t) the nodes in service whose counter is ≥ t,
// and U all nodes in service. Fencing (step 3) makes |S(t)| ≥ quorum when t
// is granted, so |U| − |S(t)| < quorum. Quarantining a lost node removes it
// from U and from S(t) alike, so the difference stays; a repaired node joins
// both. While |U| − |S(t)| < quorum, every quorum of nodes in service contains
// a node of S(t), and step 4 holds. This is true however the losses move
// from node to node over time, provided a majority of the nodes is up and
// has not lost data since it was last repaired at every moment, and every
// loss is detected (step 5) before the lost node's answers count. Locks
// follow the same count: H(L), the nodes in service that hold a live lock
// L, is a quorum when L is granted; a loss removes the node from H(L) and
// from U alike, and a recovery adds it to both (step 7), so no other lease
// finds a quorum of nodes in service without L while L lives.
//
// The tests that fail when a step is taken out (package redisnode, each
// run with the protection off too, where the fault must show):
// TestARestoreIsNotTrustedWhenItsQuarantineFails and
// TestARestoreNoRunningGatewaySaw (the record, step 5, against a failed
// quarantine and a gateway that never saw the node),
// TestAnEverysecCrashLosesItsTail, TestAnotherNodesDataBehindAnAddress
// and TestAFailoverToALaggingReplica (the run id in the record),
// TestAFailbackIsALoss and TestClusterShardFailbackIsALoss (the
// replication id in the record),
// TestANodeThatMayEvictIsNotCounted (the eviction policy),
// TestARecoveryNeedsAllButAMinority (recoverNeed),
// TestAnEmptyRestartRecoversFromTheOthers (the locks taken in, step 7) and
// TestAMissingSlotCounterIsRepaired (the audit).
//
// A new cluster, in which no node that answers was ever initialized (and at
// least a quorum answers), is initialized at once with zero counters, unless
// the gateway found an initialized or lost node before: it never takes the
// cluster for a new one again. Gateway replicas that start together do this
// together: each first marks every node as being initialized
// (Node.MarkInitializing: gateways share one mark per node), then checks
// every node again and initializes the marked nodes only if the cluster
// still looks new, so a replica can find some nodes initialized and the
// others marked. It leaves a marked node alone for bootGrace (20 s, on the
// node's clock; see guard.go) before it quarantines it as one that lost its
// data, rather than initialize it from the other nodes, even though a node
// that was only ever marked holds no lock: a node restored from a copy of
// its data taken while it was marked carries the mark too, and may have
// held locks since that the copy lost. The two look the same, and the
// quarantine is safe for both. The cost: a gateway that stops between its
// first initialization and its last leaves the nodes it did not reach out
// of service for bootGrace and a quarantine (MaxTTL and a margin), and the
// cluster with them, if they are a majority. An empty node without the
// mark is quarantined at once: the mark
// goes with the node's data, so a node that restarted empty has none, and a
// quarantined node is initialized, so it can never make the cluster look
// new. Waiting is safe: a node without counters refuses every lock
// operation.
//
// The guard decides on what a check found, and acts later: another replica
// may have acted in between, and a gateway may be paused for any time. So
// every node carries an epoch (NodeHealth.Epoch): a random id that every
// quarantine and every new mark replace, and that a loss of the node's data
// takes away. A repair carries the epoch of the check (or the mark) it was
// decided on, and each of its steps on the node acts only while the node's
// epoch is that one; a quarantine's marks and its record that they are
// done act only while the epoch is the quarantine's own. So a repair
// decided before a quarantine, a new mark or a loss does nothing; a repair
// and a quarantine of one node by two replicas at once leave it either
// quarantined with every slot marked or in service with none marked; and
// a quarantine's mark sent late does not land on a node repaired since.
// When a
// node must be repaired but fewer than a quorum of other nodes are in
// service (one node alone, or a majority that lost data), its counters are
// also raised to a floor from the wall clock (1000 per millisecond since
// 1970), which keeps tokens growing as long as the clock did not go back
// and fewer than 1000 grants per millisecond were made on one slot.
//
// # Semaphores
//
// Package semaphore shares a resource among up to K holders, each with a
// permit: a lease, a TTL and a fencing token of its own. Its construction
// is K locks per semaphore, permit i being the lock on PermitResource(name,
// i), and a permit any of them that is free; each is a Redlock mutex like
// any other, with its own counter (its own fence slot, by its name).
//
// Why not a counter on each node, granted when a majority of the nodes
// count fewer than K holders? Because majorities overlap only pairwise: with
// K = 2 and N = 3 nodes A, B, C, holders granted by {A, B}, {B, C} and
// {A, C} are three, while every node counts two. A counter per node bounds
// the holders a node saw, not the holders: a majority vote on "fewer than
// K" bounds the holders by K only if every K+1 majorities share a node,
// that is if (K+1)·(N − quorum) < N; two majorities always do (that is
// step 4), but with 3 or 5 nodes three need not. The chaos package's
// TestNaiveCounterAdmitsMoreThanK runs that naive counter against the
// checker the permits pass (TestSemaphoreNeverAdmitsMoreThanK) and shows
// it admit a fourth holder with K = 3.
//
// Why K locks are safe: permit i is held by a lease only while a majority
// of nodes hold PermitResource(name, i) for it, and any two majorities share
// a node, which holds that key for one lease at most (step 4's argument,
// for the lock instead of the counter). So each permit has at most one
// holder at a time, K permits have at most K, and each permit's tokens
// grow as a lock's do (steps 1 to 4 per permit), so storage fenced per
// permit rejects a paused former holder of that permit. Waiting and
// hand-off are the lock's: a waiter waits for each of the K locks at once
// and keeps the first granted.
//
// K is recorded in each permit lock's owner label and checked by reading
// every permit, 0 to MaxPermits-1 (a holder of a larger K may hold a
// permit beyond the request's K), before and after the grant, not in the
// grant's atomic step. The read before refuses a request while a permit
// with another K is held for the whole read. For two acquisitions with
// different K at once: each reads every permit after its own grant
// returned, and the grant that returned first is then held by a majority
// of nodes, all of which the other's later read asks; Inspect reports the
// permit when they answer. So one of the two sees the other and gives its
// permit back (or both do). What this does not give: a node of the majority
// that does not answer the read (a timeout) can hide a permit, and then
// two K can be held at once; the holders are then at most the larger K,
// and the next acquisition whose reads are answered sees the
// disagreement. Storage fenced by one counter for all permits cannot be
// built from these tokens: they grow per permit, not across permits.
//
// # A node that is a Redis Cluster
//
// A node may be a whole Redis Cluster (redisnode.ClusterNode): one Redlock
// node whose keys are spread over its shards by hash slot. Nothing above
// changes, because every step that must be atomic touches one slot: a
// lock, its slot's fencing counter and its release channel share one
// Cluster hash slot (FenceSlot is the Cluster's slot of the resource's
// hash tag), so a script runs whole on the one shard that owns the slot,
// and a slot's counter moves with its locks when the slot migrates (a
// reshard moves keys, never copies them: the counter is on exactly one
// shard at any moment and never goes back).
//
// What identifies the node's data is the set of its primaries: the node's
// record names their run ids and replication ids, so a shard's restart or
// failover (a new process, with whatever its replica had received), its
// failback (the old process, promoted again), a shard added or one
// removed, each make a set the record does not name, and the whole node
// is lost until it recovers from the other nodes (step 7), as a single
// server that restarted. A node is in service only when every shard is. A
// reshard between the same primaries is not a loss. A gateway's
// connection to a primary it did not find at its last check stops its
// use of the node at once (a replica's connection is refused: once
// promoted, it would carry lock scripts to a process no check judged),
// and no check puts the node back in service unless it found every
// primary connected to since the last one (a connection made while a check
// ran may be to a process promoted after its probe). A check fails,
// changing nothing, when a primary's own slot map is not the one the check
// judges by (a failover or a reshard under way, or a stale node) or when a
// primary did not take the check's write (CLUSTERDOWN: it sees no majority
// of its Cluster; MOVED: it no longer serves its slot).
//
// A Cluster script cannot read the record, which lives in another slot,
// so each slot's counter carries its own copy of the epoch: a quarantine
// marks every slot with a new epoch before it records itself, epochs only
// grow (a sequence kept with the record), a slot's epoch never goes back,
// and a repair or an adoption acts on a slot only while the slot carries
// the repair's epoch. So a repair decided before a quarantine changes no
// slot the quarantine marked, as with one server.
//
// During a slot's migration the Cluster answers a script that it did not
// run (MOVED or ASK: go to another shard; TRYAGAIN, below): such a script
// is sent again, where the reply points, until the call's deadline. A lost
// reply (a timeout, a closed connection) is never followed by a second
// send, as for every node. A script declares only the lock's key and its
// slot's counter (a release's channel is built inside the script: it is
// not a key), and while a slot migrates Redis Cluster runs a script on it
// only on a shard where every key it declares exists (the source answers
// ASK once none is left there), else answers TRYAGAIN. So an
// extend, a release, a hand-off, a force-release or an inspection of a
// held lock waits only while the lock's two keys are on different shards
// (between two MIGRATE batches of the slot). A free lock's acquisition (or
// inspection) declares its lock key, which does not exist, beside its
// slot's counter, which does: it gets TRYAGAIN for the whole migration of
// the slot, is sent again until its deadline (the node timeout) and fails
// on this node when the migration lasts longer. The other Redlock nodes
// still answer, so the lock is still granted by a quorum unless another
// node is out too. redis-cli --cluster reshard moves a slot of a few keys
// (one counter and the locks that hash to it) in milliseconds; a slot left
// MIGRATING (a reshard stopped half way) refuses those acquisitions on
// this node until redis-cli --cluster fix ends it.
//
// A listing walks a Cluster node's shards one after the other. A step that
// ends while a slot migrates fails (a lock could have moved to a shard
// already walked), and List then lists through the other nodes.
//
// # What is not guaranteed
//
// A lock with a TTL is advisory. A holder can pause (GC, swapping, a slow
// network) past its TTL while another client acquires; nothing in any lock
// service stops the paused holder from acting afterwards. Redlock also
// assumes bounded clock drift between nodes. Beyond that:
//
//   - A majority of the nodes losing data at once: if one of the nodes
//     that answer is initialized, the others are quarantined for the
//     largest TTL and come back at the clock floor (refused meanwhile,
//     never a repeated token). If none is (every node restarted empty),
//     they look like a new cluster and tokens start again, unless this
//     gateway saw the cluster before.
//   - The record tells processes apart, not states of one process: a
//     process that loses data without restarting (DEBUG RELOAD, a partial
//     RESTORE by hand) keeps its record. A flush removes the record, and
//     eviction is refused (noeviction is read on every check). A record
//     in the format of gateways before it existed (no server process
//     named) is taken over as it is by the first check (redisnode's
//     upgrade.lua), so a copy restored from before an upgrade is not
//     caught.
//   - A quarantine that cannot recover from the other nodes lasts the
//     largest TTL (default 1h): keep MaxTTL as low as your holders allow,
//     and run enough nodes that a restarted one finds recoverNeed others in
//     service (with 3 nodes, restart them one at a time).
//   - A waiting request uses one lease id in all its rounds. When a round
//     fails, its copies are released (undone), and a release that a node
//     did not answer is tried again until a later round of the request
//     begins. A release sent to a stalled node at about that moment may
//     still run on it after the later round's grant there, if the two
//     went over different connections (Redis orders commands only within
//     one), and free that grant: the lease then holds one node fewer than
//     it was granted on. Not seen in the tests; the fencing token still
//     protects storage.
//   - A Redis Cluster node trusts what its primaries agree on: a check
//     that reads a slot map on which every primary it reaches still names
//     a primary already failed over (before the Cluster's primaries learn
//     of the promotion, or an old primary cut off with the minority, until
//     cluster-node-timeout makes it refuse) finds that old process and
//     keeps the node in service; the lock scripts that reach it meanwhile
//     are lost when it rejoins as a replica. A later check finds the new
//     primary, and the node is lost and recovered (step 7).
//   - A failback is found by the replication id the record keeps with the
//     run id (step 5): a promotion draws a new one and keeps the one
//     before as master_replid2. A primary also draws a new one when it
//     makes or frees its backlog (its first replica's SYNC, or its
//     replicas gone for repl-backlog-ttl), with master_replid2 cleared: no
//     write is lost, and a process found so names no replication id, which
//     is never taken for a failback. So a failback followed by such a
//     backlog change before any check is not caught. A record written by
//     a gateway from before it kept a replication id takes in the one the
//     first check of this version finds (redisnode's rrepl.lua): a
//     failback before that check is not caught either. Until the next
//     check, lock scripts sent over connections opened before a failback
//     are served, unless a check or a lock script met the process while
//     it was a replica (refusing writes: READONLY), which stops the node
//     until a check finds what it is now. Every failback caught is a
//     loss, including a manual one (CLUSTER FAILOVER, SENTINEL FAILOVER)
//     that waited for the replica to catch up and lost nothing: the node
//     cannot tell them apart, and recovers from the other nodes.
//   - With fewer than a quorum of nodes in service nothing is granted; a
//     node that refuses writes (maxmemory reached with noeviction, a failing
//     disk) does not count.
//
// The real safety is the fencing token checked by the storage that the lock
// protects: storage that admits a write only when its token is at least the
// highest it has seen rejects the paused holder. Package fencing does that.
package lockcore
