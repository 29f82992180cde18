-- quarantine.lua: record that the node's quarantine began (once).
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] this quarantine's epoch: a random id, new for every call
-- Sets init, and qsince to the node's time now unless it is set already, in
-- which case the quarantine keeps its start; clears qdone (the slots are
-- marked next, by mark.lua, then qdone.lua sets it) and boot; sets qepoch to ARGV[1], so that a
-- repair begun before does not put the node back in service (repair.lua,
-- serve.lua) and an earlier quarantine does not set qdone for this one's
-- marks (qdone.lua). A random epoch, unlike a count, cannot come back after
-- the node loses its data. Lifts the beat (see lift.lua). Returns qsince.
local now = lift(KEYS[1])
redis.call('HSET', KEYS[1], 'init', '1')
local q = redis.call('HGET', KEYS[1], 'qsince')
if not q then
  q = string.format('%d', now)
  redis.call('HSET', KEYS[1], 'qsince', q)
end
redis.call('HDEL', KEYS[1], 'qdone', 'boot')
redis.call('HSET', KEYS[1], 'qepoch', ARGV[1])
return tonumber(q)
