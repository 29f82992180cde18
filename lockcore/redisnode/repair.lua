-- repair.lua: raise one slot's counter to at least a floor and put the slot
-- back in service.
-- KEYS[1] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- KEYS[2] meta hash     lockgate:{meta}:node (see check.lua)
-- ARGV[1] floor (decimal; written as given, so it stays exact up to 2^53)
-- ARGV[2] the epoch the repair was decided on (see lockcore.Node.Repair)
-- Returns 1, or 0 without changing anything when the node's epoch is no
-- longer ARGV[2]: a quarantine began since (its marks must stay), the node
-- was marked again, or it lost its data.
if redis.call('HGET', KEYS[2], 'qepoch') ~= ARGV[2] then
  return 0
end
local cur = redis.call('HGET', KEYS[1], 'n')
if not cur or tonumber(cur) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'n', ARGV[1])
end
redis.call('HDEL', KEYS[1], 'q')
return 1
