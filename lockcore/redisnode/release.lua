-- release.lua: delete a lock the lease holds and announce the release.
-- KEYS[1] lock hash  lockgate:{resource}:lock
-- KEYS[2] channel    lockgate:{resource}:released
-- ARGV[1] lease id
-- Returns {1, token} released, {0, pttl} held by another lease, {-1, 0} not
-- held. Only a release by the holder publishes, on KEYS[2], with the released
-- token in decimal as payload (not secret; watchers ignore it). The PUBLISH
-- happens in the same atomic step as the DEL, so a subscriber that subscribed
-- before it cannot miss it.
local holder = redis.call('HGET', KEYS[1], 'lease')
if not holder then
  return {-1, 0}
end
if holder ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local tok = redis.call('HGET', KEYS[1], 'tok')
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], tok)
return {1, tonumber(tok)}
