-- readrw.lua: read holds of readers-writer locks as locks, for a listing
-- or a recovery (lockcore.Lister.InspectLocks of RWHoldResource names).
-- KEYS[k] rw hash lockgate:{name}:rw of the k-th hold (see rwlib.lua)
-- ARGV[k] the hold's field ('r' or 'w', then the lease id)
-- Returns, per hold, {lease, token, owner, ttl, pttl}: lease '' and zeros
-- when the hold is not live. Reads only.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for k = 1, #KEYS do
  local v = redis.call('HGET', KEYS[k], ARGV[k])
  local exp, tok, ttl, owner
  if v then
    exp, tok, ttl, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
  end
  if v and tonumber(exp) > now then
    out[#out + 1] = string.sub(ARGV[k], 2)
    out[#out + 1] = tonumber(tok)
    out[#out + 1] = owner
    out[#out + 1] = tonumber(ttl)
    out[#out + 1] = tonumber(exp) - now
  else
    out[#out + 1] = ''
    out[#out + 1] = 0
    out[#out + 1] = ''
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
return out
