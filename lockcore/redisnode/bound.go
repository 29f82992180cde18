package redisnode

import (
	"context"
	_ "embed"
	"errors"

	"github.com/redis/go-redis/v9"
)

// A Node's lock scripts are its own: each starts with a line naming the
// Node (a random id), so their SHA1s are known to no other client, and they
// are loaded (SCRIPT LOAD) only into a server process a Check of this Node
// judged in service, and called only with EVALSHA. Redis keeps its script
// cache in the process alone (not in the AOF, RDB or replication stream),
// so a process no Check of this Node judged answers NOSCRIPT and runs
// nothing, whatever carries the connection: a connection made before a
// restart that a proxy kept open and dialed again behind it, one that a
// load balancer moved, a replica promoted behind the address. The Node is
// then untrusted until a Check judges the process that answers (rule 5 of
// package lockcore's doc). A SCRIPT FLUSH costs the same: refusals until
// the next Check loads the scripts again.

//go:embed counters.lua
var countersLua string

// lockScripts are the scripts of one Node (see above), and their sources
// (for SCRIPT LOAD: go-redis's Script.Load on a pipeline forgets the hash).
type lockScripts struct {
	acquire, extend, release, handoff, fence, inspect, force, counters *redis.Script
	srcs                                                               []string
	countersSrc                                                        string
	rw                                                                 rwScripts
}

// newLockScripts makes the lock scripts of the Node named id.
func newLockScripts(id string) lockScripts {
	head := "-- lockgate node " + id + "\n"
	var sc lockScripts
	mk := func(src string) *redis.Script {
		sc.srcs = append(sc.srcs, src)
		return redis.NewScript(src)
	}
	sc.acquire, sc.extend, sc.release = mk(head+guardLua+acquireLua), mk(head+guardLua+extendLua), mk(head+guardLua+releaseLua)
	sc.handoff, sc.fence, sc.inspect = mk(head+guardLua+handoffLua), mk(head+guardLua+fenceLua), mk(head+guardLua+inspectLua)
	sc.countersSrc = head + countersLua
	sc.force, sc.counters = mk(head+forceLua), mk(sc.countersSrc)
	rw := func(src string) *redis.Script { return mk(head + guardLua + rwLib + src) }
	sc.rw = rwScripts{acquire: rw(rwAcquireLua), extend: rw(rwExtendLua), release: rw(rwReleaseLua),
		raise: rw(rwRaiseLua), inspect: rw(rwInspectLua)}
	return sc
}

// errUnjudged is what a bound script fails with on a process that lacks it
// (NOSCRIPT: it did not run).
var errUnjudged = errors.New("redisnode: the server process that answered was not judged by this gateway's checks (NOSCRIPT); the script did not run")

// bind makes sure the Node's scripts are in server process proc, which a
// Check or Repair of this Node just judged in service: unless they were
// loaded into proc already, it sends SCRIPT LOAD for each, then INFO, in
// one pipeline, and reports whether the INFO found proc. Processes only
// follow one another, so if the INFO after the loads found proc, the loads
// reached proc or one before it, never a later one; if it found another,
// that one may hold the scripts without being judged, and the Node stays
// untrusted until a Check judges it.
func (n *Node) bind(ctx context.Context, proc string) (bool, error) {
	if n.protect != "1" {
		return true, nil
	}
	n.mu.Lock()
	done := n.loadedIn == proc
	n.mu.Unlock()
	if done {
		return true, nil
	}
	pipe := n.rdb.Pipeline()
	for _, src := range n.sc.srcs {
		pipe.ScriptLoad(ctx, src)
	}
	inf := pipe.Info(ctx, "server", "replication")
	if _, err := pipe.Exec(ctx); err != nil {
		return false, timedOut(ctx, err)
	}
	if _, found := processOf(inf.Val()); found != proc {
		return false, nil
	}
	n.mu.Lock()
	n.loadedIn = proc
	n.mu.Unlock()
	return true, nil
}

// unjudged notes that a bound script met a process that lacks it: the
// connections reach a process no Check of this Node judged. The Node is
// untrusted, and the process its connections reach unknown, until a Check
// finds it (see observed).
func (n *Node) unjudged() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.trusted.Store(false)
	n.loadedIn = ""
	n.connProc = ""
	n.conns++
}

// isNoScript reports whether err says a script was not in the script cache.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, errUnjudged) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
