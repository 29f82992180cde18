-- handoff.lua: release a lock the lease holds and, in the same atomic step,
-- grant it to the next waiter of the same gateway replica.
-- KEYS[1] lock hash     lockgate:{resource}:lock (fields as in acquire.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id being released
-- ARGV[2] next lease id   ARGV[3] next ttl in ms   ARGV[4] next owner label
-- ARGV[5] replica id of the asking gateway
-- ARGV[6] expected token of the released lock (If-Match), or 0 for no check
-- Returns {released, value, wanted, handed, token}:
--   released 1 (value = released token), -2 (value = the lock's token, not
--   the expected one: nothing changed), 0 (value = pttl: held by another
--   lease, nothing changed), -1 (not held, nothing changed) or -9 (the node
--   is out of service, nothing changed);
--   wanted 1 when the released lock had been refused to another replica;
--   handed 1: granted to the next lease with token (counter incremented),
--   announced as a grant (see below); 0: not passed on, and a release was
--   published as release.lua publishes it.
-- The lock is passed on only when it was granted for this replica (by, not
-- empty) and nobody through another replica was refused it (no x).
-- A grant to the next lease publishes on lockgate:{resource}:acquired as
-- acquire.lua does (payload the new token), not on the released channel:
-- the lock was never free, so no waiter is woken.
if slotout(KEYS[2]) then
  return {-9, 0, 0, 0, 0}
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'tok', 'by', 'x')
if not h[1] then
  return {-1, 0, 0, 0, 0}
end
if ARGV[6] ~= '0' and tonumber(h[2]) ~= tonumber(ARGV[6]) then
  return {-2, tonumber(h[2]), 0, 0, 0}
end
if h[1] ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1]), 0, 0, 0}
end
redis.call('DEL', KEYS[1])
local wanted = 0
if h[4] then
  wanted = 1
end
if ARGV[5] ~= '' and h[3] == ARGV[5] and wanted == 0 and ARGV[2] ~= ARGV[1] then
  local tok = redis.call('HINCRBY', KEYS[2], 'n', 1)
  redis.call('HSET', KEYS[1], 'lease', ARGV[2], 'tok', string.format('%d', tok), 'owner', ARGV[4], 'ttl', ARGV[3], 'by', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'acquired', string.format('%d', tok))
  return {1, tonumber(h[2]), 0, 1, tok}
end
redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'released', h[2])
return {1, tonumber(h[2]), wanted, 0, 0}
