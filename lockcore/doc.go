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
// by the node timeout: Options.NodeTimeout (far below any TTL) while the
// nodes answer quickly, following them up to MaxNodeTimeout when a quorum
// of them answers slower (rule 8 of internal/quorum). It succeeds when a
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
// of the calls under way until then, not one per call. Failures wait for every node (up to the node timeout), since
// the kind of failure depends on every answer; so does an extend or
// release that a node refused for another token (If-Match), and an
// acquisition in which a node says the lease re-entered, unless the lease
// is known to have held nothing before (see mayHold). The calls still
// under way run on, detached from the caller, and their answers are acted
// on when they come:
//   - an acquisition's or hand-off's late grant with a lower token, or a
//     node that did not answer, is raised to the token given (as in step
//     3); a late grant with a higher token gives its copy back (if it still
//     carries that token), since that token was never given to anyone and
//     every copy of a lease must carry the token its holder was given.
//     Until it is given back, Inspect, and so every watcher and election
//     observer, reports the token a quorum of the lease's copies carry,
//     which is the holder's, not the late copy's
//     (TestCallsAreAnsweredAtTheFirstQuorum,
//     TestInspectReportsTheTokenAQuorumCarries).
//     A lease id the client chose may be in use by a retry through another
//     replica at the same time; the quorum that granted this round holds
//     the same lease, so it holds on. A late grant to an attempt that
//     failed after all, or to a lease released meanwhile, is released for a
//     lease id the gateway minted; for one the client chose it is left to
//     expire with its TTL, as a node that did not answer is, since it may
//     be the retry's. Such a copy's token may be above the one the client
//     was given: an Extend with If-Match that a quorum did under the
//     client's token answers that token (the copy is extended without the
//     check, see checked), so the holder's next If-Match still matches.
//     Without If-Match an Extend answers, and fences, the highest token its
//     quorum holds;
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
// Drift is also why an observer could read a token no holder is given: a
// grant whose quorum returned different tokens carries the lower ones on
// some copies until step 3 raises them. Inspect reports a token only once
// a quorum of the lease's copies carry it, reading again (a few times,
// milliseconds apart) while they agree on none, and then the quorum-th
// highest. Counters
// drift with every split round (waiters of two replicas racing for a freed
// lock: the nodes that granted the losing attempt spent a token each, and
// its undo gives the copy back, not the token), so a failed attempt that
// some nodes granted raises the other nodes that answered to the highest
// token it spent, in the background (TestASplitRoundLeavesTheCountersLevel).
// Raising a counter never weakens step 4. The window is left where a node
// was down or slow when tokens were spent: the token a holder is answered
// is the one that fences; Inspect's is what the copies carry.
//
// A force release (Redlock.ForceRelease, an operator's tool) breaks a lock
// whose holder may not have been answered yet: its step 3 may still be
// under way. Deleting the copies alone lets a later grant on the nodes
// whose counters lag carry the broken holder's token or a lower one (bug
// 15 in RELIABILITY.md). So, rules FR1 to FR4:
//
//	FR1. Hold. On every node, one atomic step (ForceReleaser.BreakLock)
//	     replaces the lock by a hold of the force release's own (seconds
//	     at most) and reads the slot's counter, which covers every token
//	     the node granted before. A grant still in flight that reaches a
//	     node after it is refused as any grant to a held lock
//	     (TestAGrantDuringAForceReleaseIsRefusedSchedule, in chaos).
//	FR2. Raise. Every node's counter is raised to the highest read (step
//	     3's script), and a quorum must take it before any hold is
//	     released: every later grant meets a raised node, so its token is
//	     above any the broken lease was or will be answered
//	     (TestForceReleaseOfAGrantInFlightSchedule, first case).
//	FR3. Unheard nodes. When a node did not answer the break, its counter
//	     is unknown (it may be the highest: the broken lease's token came
//	     from it): the raise goes to the clock floor, which is above every
//	     token granted before (as in the repair of a node that cannot read
//	     the others; TestForceReleaseOfAGrantInFlightSchedule, second case).
//	FR4. Wait out the broken lease's round. A round counts only the
//	     grants its node calls returned, and no node call lasts longer
//	     than MaxNodeTimeout; a round that holds a grant made before the
//	     break began before it. So the holds stay until MaxNodeTimeout
//	     after the break: any grant that round could still count meets a
//	     hold (TestAGrantDuringAForceReleaseIsRefusedSchedule, its case of
//	     a grant after the raise). This assumes that no gateway replica
//	     runs with a larger MaxNodeTimeout than the one that forces.
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
//     node until its next check. Connections a gateway did not make can
//     carry its calls too (a proxy that keeps its clients' connections and
//     dials a new server behind them): so a gateway's lock scripts exist
//     only in the processes its checks judged in service (Redis keeps its
//     script cache in the process alone), and a process that lacks them
//     runs none and stops the node until a check
//     (TestAProcessBehindAConnectionKeepingProxyServesNoLock). The data
//     can also change under the same process; a node whose settings allow
//     that does not serve: one that may evict keys, one that allows DEBUG
//     RELOAD (TestANodeThatAllowsDebugReloadDoesNotServe), one that frees
//     its replication backlog, after which a failback no longer shows in
//     the replication id (TestANodeThatFreesItsBacklogDoesNotServe). A node whose maxmemory-policy may evict
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
//     A recovery reads and adopts page by page (see recoverFrom): each
//     source is walked in scan steps, a page is adopted as it comes, every
//     step has its own timeout (a failed page is read again once from its
//     cursor), and a source counts only when its walk, then its counters,
//     were read to the end. So a recovery lasts as long as the locks held
//     take, with no bound for the whole. A copy of a lock is left out when
//     one adopted before has its lease, a token no smaller and an expiry
//     no earlier (adopting it would change nothing); each lock is adopted
//     with a second more than its remaining TTL, so that the same lock on
//     another source is adopted once. Memory: a few pages, and about 110
//     MB per million locks adopted (TestARecoveryReadsEverySourceToTheEnd,
//     TestARecoveryAdoptsACopyOnceOnlyWhenAnotherCoversIt; redisnode's
//     TestARecoveryTakesInEveryHeldLock).
//
// Safety therefore comes from the other nodes, not from each node's disk: a
// node that lost the tail of its writes (appendfsync everysec, or no AOF
// at all) recovers as an empty one does. What a node's persistence still
// buys is availability, in rule 8:
//
//  8. A restart of a majority. When a majority restarts at once (a host
//     reboot, a compose restart, scripts/dev-stack down and up), no node
//     is in service to recover from, and rule 7 alone would wait out the
//     quarantine. But a node that acknowledges no write before it is on
//     disk (Redis: appendonly with appendfsync always) lost nothing in a
//     restart; what a restart cannot be told apart from by the node alone
//     is a restore of an older copy. So each node's record carries (a
//     Rejoiner's NodeHealth): an ID for its data, drawn at every serve; a
//     ServedAt mark, its own clock's milliseconds, that every guard pass
//     that finds it in service raises; Durable, true while every check
//     that found it in service since it was last served found it on
//     appendfsync always, and kept by a quarantine only when the
//     quarantine was begun because another server process took the data
//     over; and Witnessed, the highest ServedAt the guard saw each other
//     node with, written onto every node in service after each pass
//     (Rejoiner.Witness). Call a node whole when it is in service, or
//     quarantined and Durable with an ID no other node's data also has,
//     and no other node witnessed it served later than its own ServedAt
//     says (whole, witnessed). When every node answers its check and the
//     whole nodes W make a quorum, a quarantined node of W recovers as in
//     rule 7, with the others of W as its sources, read even while they
//     are quarantined (Rejoiner.Lent, each read bound to the source's
//     quarantine epoch and server process, as rule 7b binds the target):
//     it takes in every lock they hold and raises its counters to their
//     highest. Why enough: W is a quorum, so it meets the quorum that
//     holds any live lock and the quorum that fenced any token, and a node
//     of W holds them unless its data is older than what it acknowledged.
//     Rules 7a–7e hold as for any recovery. A node restored from an older
//     copy is caught by any node that kept its data and saw it served
//     since the copy (its witness is newer), and leaves W: with a
//     minority restored, the rest of W is still a quorum and holds every
//     lock, the restored node taking them in; with a majority restored
//     from copies of one moment and the rest not whole, no W makes a
//     quorum and the quarantine runs as before. Every node must answer so
//     that every witness is heard: a node restored while the nodes that
//     could contradict it are down is not trusted until they answer.
//     What is not caught: copies restored on a quorum of nodes, taken
//     after the last pass whose witnesses reached the others (within two
//     check intervals, CheckInterval, of the copy), or every node restored
//     from copies of one moment: that is a new cluster's data, as etcd's
//     snapshot restore makes a new cluster, and must be started as one
//     (its nodes emptied). Nodes on appendfsync everysec may each lose
//     the tail of their writes in a crash of a majority, which no witness
//     shows: they are not Durable and wait out the quarantine. Tests:
//     TestAMajorityRestartOfAlwaysNodes (back in about a second and a
//     half, the held lock still held; on everysec, still quarantined),
//     TestRestoresDuringAMajorityRestartAreCaught (two nodes back from
//     copies of one moment beside a node that is not whole: with the
//     witnesses hidden a second lease gets a held lock), package chaos's
//     TestMajorityRestartSchedule and
//     TestRestoresDuringAMajorityRestartSchedule (two gateways under load,
//     model-checked), package lockcore's
//     TestAMajorityRestartOfDurableNodes and
//     TestARestoreDuringAMajorityRestartIsCaught (the same over in-memory
//     nodes, the witness check switched off), and TestWhole.
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
// The guard decides on what a check found, and acts later, after reads
// of the other nodes that may take seconds: another replica may act in
// between, the node may lose its data again, and a gateway may be paused
// for any time. So every node carries an epoch (NodeHealth.Epoch): a
// random id that every quarantine and every new mark replace, and that a
// loss of the node's data takes away. A repair carries the epoch of the
// check (or the mark) it was decided on, and each of its steps on the
// node acts only while the node's epoch is that one; a quarantine's marks
// and its record that they are done act only while the epoch is the
// quarantine's own. So a repair decided before a quarantine, a new mark
// or a loss does nothing; a repair and a quarantine of one node by two
// replicas at once leave it either quarantined with every slot marked or
// in service with none marked; and a quarantine's mark sent late does not
// land on a node repaired since. Four more rules bind a recovery to the
// moment it was decided (each names the redisnode test that fails
// without it):
//
//	7a. Serving ends the epoch. The step that puts the node in service
//	    deletes its epoch, so no repair decided before it can serve the
//	    node again, whatever copy of the data the node holds by then (a
//	    copy taken after the serve carries no epoch).
//	    TestARecoveryDecidedBeforeAServeChangesNothing.
//	7b. A repair serves only the server process (run id and replication
//	    history) that its quarantine or mark was made for. A check finds
//	    a node quarantined only when that process answers, and the step
//	    that serves reads the process again in the same atomic step as
//	    its write. So a restart, a restore or a failback between the
//	    check and the serve voids the repair, whatever copy the new
//	    process loaded (a copy taken during the quarantine still carries
//	    its epoch). TestARecoveryDoesNotServeAnotherProcess.
//	7c. The reads of the other nodes come after that check (check, then
//	    read, then write). With 7a and 7b the node served nothing between
//	    the check and its serve: no lock was granted on it in between, so
//	    a lock live at the serve was either granted before the quarantine
//	    (and is on quorum − 1 other nodes, which reads after the check
//	    find while it lives) or granted on a quorum of the other nodes
//	    without it. A recovery whose node was served and lost again while
//	    it read is refused by both rules:
//	    TestARecoveryDecidedBeforeALaterLossDoesNotServe, the attack that
//	    granted a second holder while the first held, fails only with both
//	    rules removed.
//	7d. A quarantine of the same process that is still marking its slots
//	    goes on with its epoch (one server; a Cluster node marks its slots
//	    before it records the quarantine): gateways that find the loss at
//	    once, or one gateway's unfinished quarantine, do not void each
//	    other's marks with new epochs. Nothing was served since it began
//	    (serving clears it). TestAQuarantineUnderWayGoesOnWithItsEpoch.
//	7e. One recovery of a node at a time: a replica first claims the
//	    node's recovery on the node (RecoveryClaimer, a key that expires
//	    after 5 s unless its holder renews it while it reads), and a
//	    replica that finds another's claim leaves the node to it and looks
//	    again later. This rule is about work, not safety (7a–7d hold
//	    whoever recovers): a claim that lapses while its holder is paused
//	    lets another replica recover, and the paused one stops when it
//	    finds the claim taken, or fails on the epoch. Without it, every
//	    replica that found the loss walks every source
//	    (TestOneGatewayRecoversANodeAtATime: 36 scan steps on a source for
//	    three replicas against 12 for one).
//
// A repair that finds the epoch changed (another replica served or
// quarantined the node first) fails with ErrNodeChanged, and the guard
// checks the node again at once.
//
// When a node must be repaired but fewer than a quorum of other nodes
// are in service (one node alone, or a majority that lost data), its
// counters are also raised to a floor from the wall clock (1000 per millisecond since
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
// # Readers-writer locks
//
// A readers-writer lock on a name is held by any number of readers
// (shared holds) or by one writer (an exclusive hold), each hold a lease
// of its own with a TTL and a fencing token (Redlock.AcquireRW and its
// siblings). It is its own lock kind: the readers-writer lock x is not the
// mutex x (each node keeps it apart, lockgate:{x}:rw beside lockgate:{x}:lock
// on a Redis node, in the same Cluster slot as the slot's counter). Each
// node keeps, per name, its holds (lease, mode, token, owner, TTL, expiry)
// and at most one waiting writer's mark (a lease and an expiry), and:
//
//	R1. Grants, in one atomic step with the slot's counter. A shared
//	    acquisition is granted when no exclusive hold is live and no
//	    other lease's wait mark is live; an exclusive one when no hold at
//	    all is live. Either grant increments the slot's counter and
//	    returns it (step 1, for both modes). The lease that holds in the
//	    mode it asks for re-enters: its TTL reset, its token unchanged.
//	    A lease that holds in the other mode is refused (R5).
//	R2. Quorum. An acquisition holds when a quorum of nodes granted it,
//	    with the mutex's validity (TTL less the time spent and the drift);
//	    one that fails releases the copies it may have taken (on the nodes
//	    that granted it or did not answer), unless the lease held the lock
//	    before (a node re-entered it). Extend needs a quorum within the new
//	    validity; Release goes to every node. Every call waits for every
//	    node, up to NodeTimeout (no answer at the first quorum). Why it
//	    excludes: the conflicts are pairwise (a writer against any other
//	    holder; readers never conflict), and two quorums of the same N
//	    nodes share a node, which refuses the later of the two grants
//	    while the earlier hold lives there. So no writer is granted beside
//	    a live reader or writer. (The semaphore needs K+1 quorums to share
//	    a node, which they need not; a readers-writer lock needs two.)
//	R3. Fencing. The token is the largest the granting nodes returned,
//	    made to hold on a quorum before it is answered (step 3), whatever
//	    the mode. By step 4 every grant's token, reader's or writer's, is
//	    above the token of every grant of the name that completed before
//	    it started: a writer's token is above every earlier holder's. What
//	    a reader's token r promises: every writer granted before the
//	    reader's grant began has a token below r, and every writer granted
//	    after it ended has one above r. A store that keeps W, the highest
//	    writer token whose write it applied, serves a read under r as
//	    current only while r > W: a write under t makes every read-side
//	    token below t stale (its reader's hold ended before that writer's
//	    grant). Readers' tokens are distinct and may be recorded by a
//	    store fenced for writes: the next writer's is above them.
//	R4. Fairness: a waiting writer blocks new readers. A writer that
//	    waits and is refused on a node sets the node's wait mark when no
//	    other lease's mark is live there (its own it renews), living
//	    RWMarkTTL (1 s) on the node's clock; the writer tries again at
//	    least every RWMarkTTL/4 while it waits. While a mark lives, the
//	    node grants no new reader (readers already holding still extend,
//	    re-enter and release). A mark ends with its writer's grant on that
//	    node, with its release (a wait that ends without the lock releases
//	    its lease on every node, mark included), or RWMarkTTL after the
//	    writer's last try: a writer that goes away blocks readers for at
//	    most RWMarkTTL. Once more than N − quorum nodes carry the mark, no
//	    new reader finds a quorum, the readers holding leave within their
//	    TTLs, and the writer is granted: a stream of readers cannot starve
//	    it. The rule prefers writers: readers may wait behind a stream of
//	    writers, and writers among themselves are not ordered (a second
//	    writer marks once the first's mark is gone).
//	R5. Upgrades are refused. A lease holding shared that asks for
//	    exclusive (or the reverse) is refused on every node, changing
//	    nothing (ErrModeHeld; HTTP 409 mode-held). An atomic upgrade
//	    deadlocks when two readers upgrade at once (each waits for the
//	    other to leave) unless one is refused anyway, and a non-atomic one
//	    is a release and an acquisition; the caller does that, and the
//	    tokens order the two holds (R3).
//	R6. Nodes that lose data. A node lists each live hold as a lock of
//	    its own (Lister), named RWHoldResource(name, exclusive, lease): a
//	    name outside the resource alphabet, as a permit's, so List never
//	    shows it and no mutex can take it. Step 7's recovery therefore
//	    reads every live hold, reader's and writer's, from the other nodes
//	    and the node's Adopter takes it back in as a hold of its mode, with
//	    its token and remaining time, before the node serves again; the
//	    argument of step 7 carries over unchanged (a live hold is on at
//	    least quorum − 1 other nodes, and any recoverNeed of them include
//	    one). So a node restarted empty is recovered with the readers of
//	    every name, and refuses a writer beside them. Wait marks are not
//	    recovered: they serve fairness, never exclusion. Copies that
//	    disagree (a reader's and a writer's hold adopted into one name,
//	    which only the leftovers of failed attempts make) are both kept:
//	    each blocks the other's mode, and a hold is extended only while no
//	    hold of a conflicting mode is on the node, so neither is extended
//	    there until both expire (the mutex's "held for neither").
//	R7. Nodes. The in-memory node, a single Redis node and a Redis
//	    Cluster node (one script per operation, rw*.lua, whose two keys,
//	    the lock's hash and its slot's counter, share a Cluster slot) keep
//	    readers-writer locks; a node that does not (a test's wrapper, say)
//	    makes every readers-writer call fail with ErrNotSupported,
//	    changing nothing.
//
// # Lock sets
//
// A lock set takes several locks for one lease, all or none
// (Redlock.AcquireSet and its siblings): one lease id and one TTL for the
// set, a fencing token per member. Its members may hash to different
// Cluster shards, and do lie on different Redlock nodes' keys, so no one
// script can take them together; the set is built from the mutex, as a
// semaphore is, and all-or-none is what its rules give the caller, not an
// atomic step on a node:
//
//	S1. A member is the mutex. Member x of a set is the lock on x that
//	    Acquire takes (lockgate:{x}:lock, its slot's counter), held by
//	    the set's lease id, granted by its own Redlock round and fenced
//	    by steps 1 to 4 with its own token. So a set excludes single
//	    locks and other sets exactly where they share a member (two
//	    quorums share a node, which holds x for one lease), and each
//	    member's tokens grow as any lock's. A set holds while every
//	    member holds; its answer lists each member's token.
//	S2. One order. Every set takes its members in the canonical order
//	    (SetMembers: sorted by name, byte by byte), one at a time, and
//	    waits only for the next one. Why no deadlock: say sets A1 ... Ak
//	    wait in a cycle, Ai for member mi held by Ai+1 (Ak+1 = A1). Ai+1
//	    holds mi and waits for mi+1, which comes after every member it
//	    holds, so mi < mi+1 for every i, and m1 < m1: there is no such
//	    cycle. Queues add edges too: a set behind another in mi's queue
//	    waits for it; that one waits for mi as well, so along any chain
//	    of waits the member waited for never goes down, and a cycle
//	    would keep it equal, inside one queue, whose order is strict
//	    and whose member's holder is in no queue for it. A plain lock's
//	    holder waits for nothing while it holds (inside the gateway).
//	    TestSetsTakenOutOfOrderDeadlock takes two sets in the order
//	    asked, {b, a} and {a, b}: they wait for each other until the
//	    first one's wait runs out (nodetest's OverlappingSets, which the
//	    canonical order passes); the soak of 16 clients
//	    (TestOverlappingSetsUnderLoad) sees most waits run out that way,
//	    and hardly any in one order.
//	S3. All or none. A set is answered only when every member is held.
//	    When a member cannot be had (still held after the wait, no
//	    quorum, the caller gone, the Redlock closing), every member this
//	    request took is released before the answer (a release hands the
//	    member to this replica's next waiter), and the refusal names the
//	    member. For a lease id the gateway minted, a release a node did
//	    not answer is sent again in the background until it answers, as
//	    for an abandoned lease
//	    (TestASetRefusedByFailedNodesIsUndoneWhenTheyAreBack: with one
//	    release only, the member stays held on the nodes that missed it);
//	    a lease id the client chose may be in use by its retry, so those
//	    copies expire with their TTL. A member the lease held before the
//	    request (it re-entered: a retry) is left as Acquire leaves it.
//	    Without the undo, a refused set leaves its first members held
//	    (RunSets' "a refused set leaves no member held").
//	S4. Waiting is fair per member. A set waits for a member in that
//	    member's queue, as a waiting Acquire does (package waitroom: first
//	    come, first served on this replica, hand-off on release), with
//	    what is left of its wait, so single-lock traffic on a member does
//	    not pass it, and it passes no one (RunSets' "a waiting set is
//	    served before single-lock waiters that came after it"). The price
//	    of S2 is hold and wait: the members a waiting set holds are held
//	    while it waits.
//	S5. Held members are kept. While a set waits, the members it holds
//	    are extended every TTL/3. When one cannot be (its validity ran
//	    out before an extend succeeded, or another lease or none holds
//	    it), the wait ends and the set is undone (S3), answered as taken
//	    on that member. Without it a set waiting longer than its TTL
//	    loses its first members (RunSets' "a waiting set keeps the
//	    members it holds").
//	S6. One validity. When the last member is granted, the members whose
//	    validity ends more than TTL/10 before the last one's are extended
//	    (one round, all at once). The set's validity is the least of its
//	    members', each counted as Redlock counts a lease's (TTL − time
//	    spent − drift); below MinValidity the set is undone and the
//	    answer is no-quorum. Without the extend a set granted after a
//	    wait reports the validity left on its first member (RunSets' "a
//	    set granted after a wait has its members' validity").
//	S7. Extend, release and inspect act on every member, all at once.
//	    An extend holds the set when every member was extended; when a
//	    member is no longer held by the lease (expired, broken, another
//	    lease's), the set is lost: the members still held are released,
//	    so a lost set is not kept in part, and the answer is not-held
//	    naming the member. A no-quorum on a member is answered as such,
//	    releasing nothing (the set may still hold; extending again is
//	    safe). A release frees every member; it is not-held only when the
//	    lease held none.
//	S8. A gateway that stops mid-set (a crash, SIGKILL, a lost network)
//	    leaves the members it took held on the nodes until their TTL runs
//	    out: no one extends them any more, and the keeper (S5) extended
//	    the last time at most TTL/3 before. So a set is never held in
//	    part beyond a TTL after its gateway stops (RunSets' "a gateway
//	    that stops mid-set"). A set whose answer was lost is held whole
//	    until its TTL; asking again with the same Lease-Id re-enters it,
//	    tokens unchanged.
//
// Nodes keep nothing new for sets: every member is a lock, so the
// recovery of a node that lost data (rules 5 to 8) takes members back in
// as it takes any lock. The same suite (nodetest.RunSets) runs over
// in-memory nodes, single Redis nodes and a Redis Cluster node whose
// shards hold a set's members apart. What a set does not give: an
// observer reading its members one by one (GET) can see a set being
// taken, or being undone, in part for the moment that lasts; only its
// answer is all or none. Fairness across gateway replicas is each
// member's, as for waiting locks. A set of n members costs n Redlock
// rounds one after the other (and one extend round after a wait).
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
//     process that loses data without restarting by an operator's hand (a
//     partial RESTORE, DEBUG RELOAD where CONFIG cannot be read to refuse
//     it) keeps its record. A flush removes the record; eviction, DEBUG
//     and a backlog that is ever freed are refused where CONFIG GET and
//     INFO show them. A record
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
//     is never taken for a failback. A node must not free its backlog
//     (repl-backlog-ttl 0, checked), and a failed-back process made its
//     backlog while it was a replica, so its replication id stays named
//     until a check sees it. A record written by a gateway from before
//     it kept a replication id takes in the one the first check of this
//     version finds (redisnode's rrepl.lua): a failback before that check
//     is not caught. Until the next
//     check, lock scripts sent over connections opened before a failback
//     are served (the process keeps its script cache), unless a check or
//     a lock script met the process while it was a replica (refusing
//     writes: READONLY), which stops the node until a check finds what it
//     is now. Every failback caught is a
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
