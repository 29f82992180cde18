-- fence.lua: raise the fencing counter (and the lease's stored token) to a
-- token minted from another node's counter. Never lowers anything.
-- KEYS[1] lock hash  lockgate:{resource}:lock
-- KEYS[2] counter    lockgate:{resource}:fence
-- ARGV[1] token      ARGV[2] lease id
-- Returns the counter's value afterwards.
local tok = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur < tok then
  redis.call('SET', KEYS[2], ARGV[1])
  cur = tok
end
if redis.call('HGET', KEYS[1], 'lease') == ARGV[2] and tonumber(redis.call('HGET', KEYS[1], 'tok')) < tok then
  redis.call('HSET', KEYS[1], 'tok', ARGV[1])
end
return cur
