-- quarantine.lua: record that the node's quarantine begins.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] this quarantine's epoch: a random id, new for every call
-- Sets init, and qsince to the node's time now, even when it is set
-- already: a node back from a copy of its data taken during an earlier
-- quarantine carries that quarantine's start, and kept, it would end the
-- new quarantine at once (a second quarantine of a node whose first one
-- was still marking only starts the clock a moment later). Clears qdone
-- (the slots are marked next, by mark.lua, then qdone.lua sets it) and
-- boot. Sets qepoch to ARGV[1], so that a repair decided before does not
-- put the node back in service (repair.lua, serve.lua) and an earlier
-- quarantine does not set qdone for this one's marks (qdone.lua). Lifts
-- the beat (see lift.lua). Returns qsince.
local now = lift(KEYS[1])
local q = string.format('%d', now)
redis.call('HSET', KEYS[1], 'init', '1', 'qsince', q)
redis.call('HDEL', KEYS[1], 'qdone', 'boot')
redis.call('HSET', KEYS[1], 'qepoch', ARGV[1])
return tonumber(q)
