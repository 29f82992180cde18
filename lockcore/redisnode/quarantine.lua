-- quarantine.lua: record that the node's quarantine began (once).
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- Sets init, and qsince to the node's time now unless it is set already, in
-- which case the quarantine keeps its start; clears qdone (the slots are
-- marked next, then qdone is set); increments qepoch, so that a repair
-- begun before does not put the node back in service (see serve.lua); lifts
-- the beat (see lift.lua). Returns qsince.
local now = lift(KEYS[1])
redis.call('HSET', KEYS[1], 'init', '1')
local q = redis.call('HGET', KEYS[1], 'qsince')
if not q then
  q = string.format('%d', now)
  redis.call('HSET', KEYS[1], 'qsince', q)
end
redis.call('HDEL', KEYS[1], 'qdone')
redis.call('HINCRBY', KEYS[1], 'qepoch', 1)
return tonumber(q)
