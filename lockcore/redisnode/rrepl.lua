-- rrepl.lua: record the replication history of a node in service whose
-- record has none for its process (see check.lua, rrepl), as the data of a
-- gateway before rrepl existed has (Node.Check).
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the run id the Check found, and judged the node in service for
-- ARGV[2] "<run id>|<replication id>" (processOf) as that Check read it
-- Sets rrepl to ARGV[2] and returns 1 only while rid is ARGV[1] and rrepl
-- names no replication history of that process; else changes nothing and
-- returns 0, so that it never overwrites the history a failback is judged
-- by. ARGV[2] is what the Check probed: a failback since then differs from
-- it, and the next Check finds the node lost.
if redis.call('HGET', KEYS[1], 'rid') ~= ARGV[1] then
  return 0
end
local r = redis.call('HGET', KEYS[1], 'rrepl')
if r and string.sub(r, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then
  return 0
end
redis.call('HSET', KEYS[1], 'rrepl', ARGV[2])
return 1
