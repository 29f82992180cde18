-- serve.lua: the last step of a repair, once every slot is repaired (and,
-- for a recovery, the other nodes' locks taken in): the node is initialized,
-- out of quarantine, and recovered for the server process that holds it.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the epoch the repair was decided on (see lockcore.Node.Repair)
-- ARGV[2] the data format version this gateway writes
-- ARGV[3] a Cluster node's set of primaries (idSet), which the gateway
--         read; '' for one server, whose process this script reads itself
--         (INFO, in the same atomic step as the write)
-- Serves only the process the repair was decided for (rule 7b of package
-- lockcore's doc): the process the quarantine (qrid) or the bootstrap mark
-- (brid) was made for, which every check that found the node quarantined
-- or marked also found answering. A process that took over since (a
-- restart, a restore, a failback), whatever copy of the data it holds,
-- is not served. Changes nothing and returns '' when the epoch is no
-- longer ARGV[1] or the process is not that one.
-- ARGV[4] a new id for the node's data (nid, see check.lua), or '' (a
--         Cluster node, which keeps none)
-- Otherwise it sets init, rid, fmt = ARGV[2], nid = ARGV[4] and, for one
-- server, rrepl; deletes dur (the node's durability is judged anew);
-- clears qsince, qrid, qdone, boot and qepoch, and returns the process it
-- served ("<run id>|<replication id>" as process.go names it, or ARGV[3]).
-- Clearing qepoch is rule 7a: a repair decided before this one served the
-- node, whose copy of the data may later come back, can never serve it.
local m = redis.call('HMGET', KEYS[1], 'qepoch', 'init', 'qrid', 'brid')
if m[1] ~= ARGV[1] then
  return ''
end
local owner = m[4]
if m[2] then
  owner = m[3]
end
owner = owner or ''
local rid, proc = ARGV[3], ''
if rid == '' then
  local info = redis.call('INFO', 'server') .. redis.call('INFO', 'replication')
  rid = string.match(info, 'run_id:(%x+)') or ''
  proc = rid .. '|'
  local r2 = string.match(info, 'master_replid2:(%x+)') or ''
  if string.find(r2, '[^0]') then
    proc = proc .. (string.match(info, 'master_replid:(%x+)') or '')
  end
  -- owner names the process as process.go's owns: its run id alone (a
  -- record of an earlier gateway), or with its replication history, which
  -- a process found with none (it made or freed its backlog) still owns.
  local mine = owner == proc or owner == rid or
    (proc == rid .. '|' and string.sub(owner, 1, #rid + 1) == rid .. '|')
  if rid == '' or not mine then
    return ''
  end
elseif owner ~= rid then
  return ''
end
redis.call('HSET', KEYS[1], 'init', '1', 'rid', rid, 'fmt', ARGV[2])
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'nid', ARGV[4])
end
redis.call('HDEL', KEYS[1], 'dur')
if proc ~= '' then
  redis.call('HSET', KEYS[1], 'rrepl', proc)
else
  redis.call('HDEL', KEYS[1], 'rrepl')
end
redis.call('HDEL', KEYS[1], 'qsince', 'qdone', 'boot', 'qrid', 'qepoch')
if proc ~= '' then
  return proc
end
return rid
