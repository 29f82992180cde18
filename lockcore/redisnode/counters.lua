-- counters.lua: read slots' fencing counters (Node.Counters), as a script
-- bound to the server processes a gateway's checks judged (bound.go).
-- KEYS  slot counter hashes  lockgate:{tag}:tokens (see guard.lua)
-- Returns one value per key: the counter n (decimal), 'q' when the slot
-- is marked quarantined, or '' when it has no counter.
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.call('HMGET', k, 'n', 'q')
  if v[2] then
    out[i] = 'q'
  else
    out[i] = v[1] or ''
  end
end
return out
