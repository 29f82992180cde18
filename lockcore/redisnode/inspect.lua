-- inspect.lua: read a lock and its remaining TTL in one step.
-- KEYS[1] lock hash  lockgate:{resource}:lock
-- Returns {} when not held, else {lease, token, owner, ttl, pttl}.
local v = redis.call('HMGET', KEYS[1], 'lease', 'tok', 'owner', 'ttl')
if not v[1] then
  return {}
end
return {v[1], tonumber(v[2]), v[3] or '', tonumber(v[4]), redis.call('PTTL', KEYS[1])}
