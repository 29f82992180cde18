-- adoptrw.lua: take in readers-writer holds other nodes hold, while this
-- node recovers (lockcore.Adopter, rule R6 of lockcore's doc).
-- KEYS[1] the meta hash lockgate:{meta}:node, holding the node's epoch
--         (field qepoch)
-- KEYS[2..] rw hashes  lockgate:{name}:rw (see rwlib.lua)
-- ARGV[1] the epoch of the quarantine the recovery was decided on
-- ARGV[5k-3..5k+1], for the hold in KEYS[k+1] (k = 1, 2, ...): its field
--         ('r' or 'w', then the lease id), token, owner, ttl in ms, and
--         the remaining time to live in ms as the other node had it
-- Returns 0, changing nothing, when the node's epoch is no longer ARGV[1].
-- Otherwise each hold is kept with the larger token and at least its
-- remaining time; holds of conflicting modes are both kept (each blocks
-- the other's mode; rwextend.lua extends neither). Returns 1.
if redis.call('HGET', KEYS[1], 'qepoch') ~= ARGV[1] then
  return 0
end
local now = rwnow()
for k = 2, #KEYS do
  local key, a = KEYS[k], 5 * (k - 2) + 1
  local f, tok, owner, ttl, exp = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3], tonumber(ARGV[a + 4]), now + tonumber(ARGV[a + 5])
  local v = redis.call('HGET', key, f)
  if v then
    local hexp, htok, httl, howner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
    if tonumber(htok) > tok then
      tok = tonumber(htok)
    end
    if tonumber(hexp) > exp then
      exp = tonumber(hexp)
    end
    ttl, owner = tonumber(httl), howner
  end
  rwput(key, {f = f, tok = tok, ttl = ttl, exp = exp, owner = owner})
  rwtouch(key, now)
end
return 1
