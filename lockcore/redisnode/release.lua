-- release.lua: delete a lock the lease holds and announce the release.
-- KEYS[1] lock hash  lockgate:{resource}:lock (fields as in acquire.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id
-- ARGV[2] expected token (If-Match), or 0 for no check
-- Returns {1, token, wanted} released (wanted 1 when an acquisition for
-- another replica was refused while it was held, else 0), {-2, token} the
-- lock's token is not the expected one (whoever holds it), {0, pttl} held by
-- another lease, {-1, 0} not held, {-9, 0} the node is out of service; only
-- {1, ...} changes anything. Only
-- a release by the holder publishes, on lockgate:{resource}:released (KEYS[1]
-- with its trailing 'lock' replaced: same hash tag, a channel, not a key, so
-- not declared), with the released token in decimal as payload (not secret; watchers ignore it). The PUBLISH happens
-- in the same atomic step as the DEL, so a subscriber that subscribed before
-- it cannot miss it.
if slotout(KEYS[2]) then
  return {-9, 0}
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'tok', 'x')
if not h[1] then
  return {-1, 0}
end
if ARGV[2] ~= '0' and tonumber(h[2]) ~= tonumber(ARGV[2]) then
  return {-2, tonumber(h[2])}
end
if h[1] ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'released', h[2])
if h[3] then
  return {1, tonumber(h[2]), 1}
end
return {1, tonumber(h[2]), 0}
