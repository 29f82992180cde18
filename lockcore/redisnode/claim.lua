-- claim.lua: take or renew a gateway's claim on this node's recovery
-- (lockcore.RecoveryClaimer). The claim is about work only: a recovery is
-- kept safe by its epoch (see repair.lua and serve.lua), not by this.
-- KEYS[1] lockgate:{meta}:recovery
-- ARGV[1] holder (the gateway replica's id)   ARGV[2] ttl in ms
-- ARGV[3] '1' to take or renew, '0' to drop the holder's claim
-- Returns 1 when the holder holds the claim afterwards (or dropped it),
-- 0 while another holder's claim lives.
local cur = redis.call('GET', KEYS[1])
if ARGV[3] == '0' then
  if cur == ARGV[1] then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
if cur and cur ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
