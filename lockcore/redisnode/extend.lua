-- extend.lua: reset the TTL of a lock the lease holds.
-- KEYS[1] lock hash  lockgate:{resource}:lock
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] protect   ARGV[2] lease id   ARGV[3] ttl in ms, or 0 for the TTL
-- last set
-- Returns {1, token, ttl} extended, {0, pttl} held by another lease,
-- {-1, 0} not held, {-9, 0} the node is out of service.
if slotout(KEYS[2], ARGV[1]) then
  return {-9, 0}
end
local holder = redis.call('HGET', KEYS[1], 'lease')
if not holder then
  return {-1, 0}
end
if holder ~= ARGV[2] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local ttl = ARGV[3]
if ttl == '0' then
  ttl = redis.call('HGET', KEYS[1], 'ttl')
else
  redis.call('HSET', KEYS[1], 'ttl', ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, tonumber(redis.call('HGET', KEYS[1], 'tok')), tonumber(ttl)}
