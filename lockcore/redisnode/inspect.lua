-- inspect.lua: read a lock and its remaining TTL in one step.
-- KEYS[1] lock hash     lockgate:{resource}:lock
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- Returns {-9} when the node is out of service, {} when not held, else
-- {lease, token, owner, ttl, pttl}.
if slotout(KEYS[2]) then
  return {-9}
end
local v = redis.call('HMGET', KEYS[1], 'lease', 'tok', 'owner', 'ttl')
if not v[1] then
  return {}
end
return {v[1], tonumber(v[2]), v[3] or '', tonumber(v[4]), redis.call('PTTL', KEYS[1])}
