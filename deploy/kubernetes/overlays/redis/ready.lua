-- ready.lua: a readiness probe for a Redis server that is one lockgate node
-- (not a Redis Cluster). It answers "serving" while the node's record names
-- the server process that runs it and no quarantine is under way: the node
-- is in service for every gateway. Anything else (a restarted process not
-- recovered yet, a quarantine, a node never initialized) answers
-- "not serving". Restart nodes one at a time, each once the one before
-- answers "serving", so that a node is never restarted while another one
-- still recovers from it (see docs/operations.md, "Restarting nodes").
--   redis-cli EVAL "$(cat ready.lua)" 0 | grep -qx serving
local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local m = redis.call('HMGET', 'lockgate:{meta}:node', 'rid', 'qsince')
if id and m[1] == id and not m[2] then
  return 'serving'
end
return 'not serving'
