-- fence.lua: raise the slot's fencing counter (and the lease's stored token)
-- to a token minted from another node's counter. Never lowers anything.
-- KEYS[1] lock hash     lockgate:{resource}:lock
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] token   ARGV[2] lease id
-- Returns {1, counter} with the counter's value afterwards, or {-9, 0} when
-- the node is out of service (nothing changed).
if slotout(KEYS[2]) then
  return {-9, 0}
end
local tok = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[2], 'n'))
if cur < tok then
  redis.call('HSET', KEYS[2], 'n', ARGV[1])
  cur = tok
end
if redis.call('HGET', KEYS[1], 'lease') == ARGV[2] and tonumber(redis.call('HGET', KEYS[1], 'tok')) < tok then
  redis.call('HSET', KEYS[1], 'tok', ARGV[1])
end
return {1, cur}
