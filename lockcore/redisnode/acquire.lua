-- acquire.lua: take a free lock and mint this node's fencing token, or
-- refresh the TTL of a lock the lease already holds.
-- KEYS[1] lock hash  lockgate:{resource}:lock  (fields lease, tok, owner, ttl)
-- KEYS[2] counter    lockgate:{resource}:fence (never expires)
-- ARGV[1] lease id   ARGV[2] ttl in ms   ARGV[3] owner label
-- Returns {1, token} granted (counter incremented), {2, token} re-entered
-- (the token stored for the lease), {0, pttl} held by another lease.
local holder = redis.call('HGET', KEYS[1], 'lease')
if not holder then
  local tok = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'lease', ARGV[1], 'tok', tok, 'owner', ARGV[3], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tok}
end
if holder == ARGV[1] then
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, tonumber(redis.call('HGET', KEYS[1], 'tok'))}
end
return {0, redis.call('PTTL', KEYS[1])}
