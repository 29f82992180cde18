-- check.lua: the node's record of what its data is (lockcore.Node.Check).
-- KEYS[1] meta hash  lockgate:{meta}:node, fields:
--   rid    the server process (run id) the node's data was last recovered
--          or initialized for (serve.lua); a node serves only while it is
--          the process that answers (see health.go, judge)
--   qrid   the server process the quarantine under way was begun for
--   init   '1' once the node was initialized or quarantined
--   qsince ms (node clock) the quarantine began; qdone '1' once every slot
--          is marked; qepoch the epoch of the quarantine or mark
--   boot   ms (node clock) a gateway began to initialize the node as one of
--          a new cluster (boot.lua); brid the server process it marked
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
-- Returns {init, beat, qsince or -1, qdone, now in ms, boot or -1,
-- qepoch or '', rid or '', qrid or '', fmt or 0, brid or '', rrepl or ''}.
local beat = redis.call('HINCRBY', KEYS[1], 'beat', 1)
local m = redis.call('HMGET', KEYS[1], 'init', 'qsince', 'qdone', 'boot', 'qepoch', 'rid', 'qrid', 'fmt', 'brid', 'rrepl')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local init, qdone = 0, 0
if m[1] then
  init = 1
end
if m[3] then
  qdone = 1
end
return {init, beat, tonumber(m[2] or '-1'), qdone, now, tonumber(m[4] or '-1'), m[5] or '', m[6] or '', m[7] or '', tonumber(m[8] or '0'), m[9] or '', m[10] or ''}
