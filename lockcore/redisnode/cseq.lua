-- cseq.lua: the next epoch sequence number of a Redis Cluster node
-- (cluster.go), from its meta hash.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua), field cseq
-- Returns, as a 20-digit decimal string, the larger of cseq + 1 and the
-- node's time in microseconds, and stores it as cseq: the numbers grow
-- for every gateway (one counter, on one shard), and keep growing after
-- the meta shard lost its data, as long as its clock did not go back.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = tonumber(redis.call('HGET', KEYS[1], 'cseq') or '0') + 1
if now > s then
  s = now
end
local out = string.format('%020.0f', s)
redis.call('HSET', KEYS[1], 'cseq', out)
return out
