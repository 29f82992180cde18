-- quarantine.lua: record that the node's quarantine begins.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] this quarantine's epoch: a random id, new for every call
-- ARGV[2] the run id of the server process the quarantine is for (as the
--         gateway's check read it)
-- Sets init, and qsince to the node's time now, even when it is set
-- already: a node back from a copy of its data taken during an earlier
-- quarantine carries that quarantine's start, and kept, it would end the
-- new quarantine at once. Sets qrid to ARGV[2]: a quarantine counts only
-- for the process it was begun for, so a copy of a quarantined node's data
-- loaded by another process is quarantined anew. Deletes rid and rrepl:
-- the node serves again only through a repair (serve.lua), and an rrepl
-- left by this quarantine's process would judge a repair by a gateway
-- that writes none (before rrepl existed) as another failback. Clears qdone (the slots
-- are marked next, by mark.lua, then qdone.lua sets it) and boot. Sets
-- qepoch to ARGV[1], so that a repair decided before does not put the node
-- back in service (repair.lua, serve.lua) and an earlier quarantine does
-- not set qdone for this one's marks (qdone.lua). Returns qsince.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local q = string.format('%d', now)
redis.call('HSET', KEYS[1], 'init', '1', 'qsince', q, 'qrid', ARGV[2])
redis.call('HDEL', KEYS[1], 'qdone', 'boot', 'rid', 'rrepl')
redis.call('HSET', KEYS[1], 'qepoch', ARGV[1])
return tonumber(q)
