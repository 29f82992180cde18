-- check.lua: the node's record of what its data is (lockcore.Node.Check).
-- KEYS[1] meta hash  lockgate:{meta}:node, fields:
--   rid    the server process (run id) the node's data was last recovered
--          or initialized for (serve.lua); a node serves only while it is
--          the process that answers (see health.go, judge)
--   qrid   the server process the quarantine under way was begun for
--          ("<run id>|<replication id>", or the run id alone as gateways
--          before wrote it; see process.go, owns)
--   init   '1' once the node was initialized or quarantined
--   qsince ms (node clock) the quarantine began; qdone '1' once every slot
--          is marked; qepoch the epoch of the quarantine or mark, which
--          serving deletes (serve.lua)
--   boot   ms (node clock) a gateway began to initialize the node as one of
--          a new cluster (boot.lua); brid the server process it marked
--          (as qrid)
--   rrepl  the server process and its replication history the data was
--          last recovered for (serve.lua): "<run id>|<master_replid>", or
--          "<run id>|" for a process not promoted since it made or freed
--          its backlog (see process.go). A process keeps its run id when
--          it becomes a replica and is promoted again (a failback), but
--          not its replication id: such a process may lack what the other
--          primary took meanwhile. Read only when its run id is rid's: a
--          gateway before this field, or a Cluster node (whose rid names
--          both already), leaves it out
--   fmt    the data format version the node was last served with
--   beat   a counter every check increments: the check's write, so that a
--          node that refuses writes (OOM, MISCONF, READONLY) answers with
--          that error
--   nid, sat, dur  what a restart of a majority needs (rule 8 of lockcore's
--          doc; witness.lua): the id of the node's data, drawn at every
--          serve; the node's clock in ms when a gateway last found it in
--          service (only grows); '1' while every check that found it in
--          service since it was last served found it durable (appendonly,
--          appendfsync always), '0' for good once one did not (and once a
--          quarantine not begun for a restart), unset before the first
-- KEYS[2] witness hash  lockgate:{meta}:wit (none on a Cluster node): by nid, the highest sat a
--          gateway saw each other node with while it found both in service
-- Returns {init, beat, qsince or -1, qdone, now in ms, boot or -1,
-- qepoch or '', rid or '', qrid or '', fmt or 0, brid or '', rrepl or '',
-- nid or '', sat or 0, dur or '', the witness hash as a flat list}.
local beat = redis.call('HINCRBY', KEYS[1], 'beat', 1)
local m = redis.call('HMGET', KEYS[1], 'init', 'qsince', 'qdone', 'boot', 'qepoch', 'rid', 'qrid', 'fmt', 'brid', 'rrepl', 'nid', 'sat', 'dur')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wit = {}
if KEYS[2] then
  wit = redis.call('HGETALL', KEYS[2])
end
local init, qdone = 0, 0
if m[1] then
  init = 1
end
if m[3] then
  qdone = 1
end
return {init, beat, tonumber(m[2] or '-1'), qdone, now, tonumber(m[4] or '-1'), m[5] or '', m[6] or '', m[7] or '', tonumber(m[8] or '0'), m[9] or '', m[10] or '',
  m[11] or '', tonumber(m[12] or '0'), m[13] or '', wit}
