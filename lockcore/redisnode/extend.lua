-- extend.lua: reset the TTL of a lock the lease holds.
-- KEYS[1] lock hash  lockgate:{resource}:lock
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id   ARGV[2] ttl in ms, or 0 for the TTL
-- last set   ARGV[3] expected token (If-Match), or 0 for no check
-- Returns {1, token, ttl} extended, {-2, token} the lock's token is not the
-- expected one (whoever holds it), {0, pttl} held by another lease, {-1, 0}
-- not held, {-9, 0} the node is out of service. Only {1, ...} changes
-- anything.
if slotout(KEYS[2]) then
  return {-9, 0}
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'tok')
if not h[1] then
  return {-1, 0}
end
if ARGV[3] ~= '0' and tonumber(h[2]) ~= tonumber(ARGV[3]) then
  return {-2, tonumber(h[2])}
end
if h[1] ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local ttl = ARGV[2]
if ttl == '0' then
  ttl = redis.call('HGET', KEYS[1], 'ttl')
else
  redis.call('HSET', KEYS[1], 'ttl', ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, tonumber(h[2]), tonumber(ttl)}
