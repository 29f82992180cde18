-- repair.lua: raise one slot's counter to at least a floor and put the slot
-- back in service.
-- KEYS[1] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] floor (decimal; written as given, so it stays exact up to 2^53)
local cur = redis.call('HGET', KEYS[1], 'n')
if not cur or tonumber(cur) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'n', ARGV[1])
end
redis.call('HDEL', KEYS[1], 'q')
return 1
