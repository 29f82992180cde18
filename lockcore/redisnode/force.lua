-- force.lua: break the lock on a resource, whatever lease holds it (or
-- none), for lockcore.ForceReleaser.BreakLock: in one atomic step the lock
-- is replaced by a hold of the force release's own lease for a while, so
-- that no grant passes it (a grant to the broken lease still in flight is
-- refused), and the slot's fencing counter is read. Nothing is announced:
-- the hold's release (release.lua) does that.
-- KEYS[1] lock hash     lockgate:{resource}:lock
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] the hold's lease id   ARGV[2] the hold's TTL in milliseconds
-- Returns {the replaced lock's token or 0, the slot's counter or 0}.
local tok = tonumber(redis.call('HGET', KEYS[1], 'tok')) or 0
local n = tonumber(redis.call('HGET', KEYS[2], 'n')) or 0
-- The hash is overwritten, not deleted and made anew: a key deleted and
-- set again in one script is refused in a Cluster slot under migration.
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if f ~= 'lease' and f ~= 'tok' and f ~= 'owner' and f ~= 'ttl' and f ~= 'by' then
    redis.call('HDEL', KEYS[1], f)
  end
end
redis.call('HSET', KEYS[1], 'lease', ARGV[1], 'tok', string.format('%d', tok), 'owner', '', 'ttl', ARGV[2], 'by', '')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {tok, n}
