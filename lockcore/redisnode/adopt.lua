-- adopt.lua: take in a lock another node holds, while this node recovers
-- (lockcore.Adopter).
-- KEYS[1] lock hash  lockgate:{resource}:lock (see acquire.lua)
-- KEYS[2] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the epoch of the quarantine the recovery was decided on
-- ARGV[2] lease id   ARGV[3] token   ARGV[4] owner   ARGV[5] ttl in ms
-- ARGV[6] remaining time to live in ms, as the other node had it
-- Returns 0, changing nothing, when the node's epoch is no longer ARGV[1].
-- Otherwise: a free lock becomes held for the lease; a lock held for the
-- same lease keeps it; a lock held for another lease (two copies disagree)
-- becomes held for nobody ('~' is no lease id), so that neither lease can
-- extend or take it here until it expires. The token becomes the larger,
-- and the lock lives at least ARGV[6] more. Returns 1.
if redis.call('HGET', KEYS[2], 'qepoch') ~= ARGV[1] then
  return 0
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'tok')
if not h[1] then
  redis.call('HSET', KEYS[1], 'lease', ARGV[2], 'tok', ARGV[3], 'owner', ARGV[4], 'ttl', ARGV[5])
else
  if h[1] ~= ARGV[2] then
    redis.call('HSET', KEYS[1], 'lease', '~')
  end
  if tonumber(h[2] or '0') < tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'tok', ARGV[3])
  end
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[6]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
return 1
