-- check.lua: the node's heartbeat and data-loss marker.
-- KEYS[1] meta hash  lockgate:{meta}:node (fields beat = heartbeats so far,
--                    init = '1' once the node was initialized or
--                    quarantined, qsince = ms (node clock) the quarantine
--                    began, qdone = '1' once every slot is marked, boot =
--                    ms (node clock) a gateway began to initialize the node
--                    as one of a new cluster, see boot.lua, qepoch = the
--                    epoch of the node's quarantine or mark)
-- Returns {init, beat, qsince or -1, qdone, now in ms, boot or -1, qepoch or
-- ''}. The beat
-- only grows while the node keeps its data, so a beat lower than one seen
-- before means the node went back to an older copy. The HINCRBY is a write,
-- so a node that refuses writes (OOM, MISCONF, READONLY) answers with that
-- error.
local beat = redis.call('HINCRBY', KEYS[1], 'beat', 1)
local m = redis.call('HMGET', KEYS[1], 'init', 'qsince', 'qdone', 'boot', 'qepoch')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local init, qdone = 0, 0
if m[1] then
  init = 1
end
if m[3] then
  qdone = 1
end
return {init, beat, tonumber(m[2] or '-1'), qdone, now, tonumber(m[4] or '-1'), m[5] or ''}
