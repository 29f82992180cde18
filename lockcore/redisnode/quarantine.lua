-- quarantine.lua: record that the node's quarantine begins, or go on with
-- one under way for the same process.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] a new epoch: a random id
-- ARGV[2] the server process the quarantine is for, as the gateway read it
--         ("<run id>|<replication id>", process.go; a Cluster node's set
--         of primaries)
-- ARGV[3] '1' to go on with a quarantine under way (one server); a Cluster
--         node marks its slots before this script (cluster_health.go), so
--         it always records its own epoch
-- With ARGV[3], a quarantine of this very process whose slots are not all marked yet
-- (qsince set, qrid = ARGV[2], qdone unset) goes on: its epoch is
-- returned and nothing changes, so that gateways that find it unfinished
-- mark the slots with it too instead of starting over (each new epoch
-- would void the marks of the one before). Nothing was served since it
-- began: serving clears qsince.
-- Otherwise it sets init, and qsince to the node's time now, even when it
-- is set already: a node back from a copy of its data taken during an
-- earlier quarantine carries that quarantine's start, and kept, it would
-- end the new quarantine at once. Sets qrid to ARGV[2]: a quarantine
-- counts only for the process it was begun for, so a copy of a quarantined
-- node's data loaded by another process is quarantined anew, and a repair
-- serves only that process (serve.lua). Deletes rid and rrepl: the node
-- serves again only through a repair. Clears qdone (the slots are marked
-- next, by mark.lua, then qdone.lua sets it) and boot. Sets qepoch to
-- ARGV[1], so that a repair decided before does not put the node back in
-- service (repair.lua, serve.lua) and an earlier quarantine does not set
-- qdone for this one's marks (qdone.lua). Returns the epoch.
local m = redis.call('HMGET', KEYS[1], 'qsince', 'qrid', 'qdone', 'qepoch')
if ARGV[3] == '1' and m[1] and m[2] == ARGV[2] and not m[3] and m[4] then
  return m[4]
end
-- dur (see check.lua) stays only when the quarantine is begun because
-- another server process holds the data than the one it was last served
-- for (a restart, or a restore: rule 8 of lockcore's doc tells them
-- apart), or on a node already quarantined, which served nothing since
-- (another gateway that found it lost before the first quarantine began
-- quarantines it again); any other quarantine (a failback, an audit, a
-- lost record) ends it for good.
local rid = redis.call('HGET', KEYS[1], 'rid')
local cur = string.match(ARGV[2], '^([^|]*)')
if ARGV[3] ~= '1' or (rid and rid == cur) or (not rid and not m[1]) then
  redis.call('HSET', KEYS[1], 'dur', '0')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'init', '1', 'qsince', string.format('%d', now), 'qrid', ARGV[2])
redis.call('HDEL', KEYS[1], 'qdone', 'boot', 'rid', 'rrepl')
redis.call('HSET', KEYS[1], 'qepoch', ARGV[1])
return ARGV[1]
