package redisnode

import "strings"

// Which server process a node's data was recovered for, and whether the
// process that answers is that one: its run id, and its replication id
// since its last promotion. The record keeps both (check.lua: rid and
// rrepl; a Cluster node's rid names both for each primary).

// processOf reads, from an INFO reply with its server and replication
// sections, the server process's run id and proc: the run id and the
// process's replication id since its last promotion, "<run id>|<id>"
// (both "" when the run id is missing). A process keeps its run id when
// it becomes a replica and is promoted again (a failback, maybe without
// what the other primary took meanwhile), but draws a new replication id
// and keeps the one before as master_replid2. A primary also draws a new
// one, with master_replid2 all zeros, when it creates its backlog (its
// first replica's SYNC) and when it frees it (repl-backlog-ttl without
// replicas): no write is lost, and a process that was never promoted
// since is named "<run id>|", so that neither is taken for a failback.
// (A failback of a primary that had no backlog, followed by a replica's
// first SYNC before any Check, is then not seen.)
func processOf(info string) (id, proc string) {
	id = infoString(info, "run_id")
	if id == "" {
		return "", ""
	}
	if strings.Trim(infoString(info, "master_replid2"), "0") == "" {
		return id, id + "|"
	}
	return id, id + "|" + infoString(info, "master_replid")
}

// isFailback reports whether the record's rrepl names another
// replication history of server process id than proc, the one found: the
// process was a replica since, and was promoted again. A proc that names
// no replication id (not promoted since it made or freed its backlog: see
// processOf) is no failback, whatever the record says.
func isFailback(rrepl, id, proc string) bool {
	return replFor(rrepl, id) && rrepl != proc && proc != id+"|"
}

// sameProcesses reports whether a Cluster node's record, rec, names the
// primaries found, cur (both as idSet gives them): the same run ids, each
// with the same replication id, or found with none (as isFailback).
func sameProcesses(rec, cur string) bool {
	r, c := strings.Split(rec, ","), strings.Split(cur, ",")
	if len(r) != len(c) {
		return false
	}
	for i := range c { // run ids have one length: both sort by run id
		id, _, _ := strings.Cut(c[i], "|")
		if r[i] != c[i] && (!replFor(r[i], id) || isFailback(r[i], id, c[i])) {
			return false
		}
	}
	return true
}

// owns reports whether owner, the process a quarantine (qrid) or a
// bootstrap mark (brid) was made for, is the server process id found with
// the replication history proc: the same history, or none found (it made
// or freed its backlog since: see processOf), or only its run id recorded
// (a record of a gateway before the history was kept). For a Cluster node
// id is the set of primaries and proc is "": the sets must be equal.
// serve.lua applies the same rule to the process that runs it.
func owns(owner, id, proc string) bool {
	switch {
	case owner == "":
		return false
	case owner == id, proc != "" && owner == proc:
		return true
	}
	return proc == id+"|" && replFor(owner, id)
}

// replFor reports whether a record's rrepl names the replication history
// of server process id (see check.lua): a gateway before rrepl existed
// writes none, and leaves that of an earlier process when it recovers the
// node for a new one.
func replFor(rrepl, id string) bool { return strings.HasPrefix(rrepl, id+"|") }
