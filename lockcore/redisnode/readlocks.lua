-- readlocks.lua: read many locks and their remaining TTLs in one atomic
-- step (Node.InspectLocks, on a single server).
-- KEYS[1..n] lock hashes  lockgate:{resource}:lock (see acquire.lua)
-- Returns 5 values per key, in order: lease, token, owner, ttl in ms and
-- the remaining time to live in ms (PTTL); a lock not held has false
-- (nil) for its lease.
local out = {}
for k = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[k], 'lease', 'tok', 'owner', 'ttl')
  local i = 5 * (k - 1)
  if v[1] then
    out[i + 1], out[i + 2], out[i + 3], out[i + 4] = v[1], tonumber(v[2]) or 0, v[3] or '', tonumber(v[4]) or 0
    out[i + 5] = redis.call('PTTL', KEYS[k])
  else
    out[i + 1], out[i + 2], out[i + 3], out[i + 4], out[i + 5] = false, 0, '', 0, 0
  end
end
return out
