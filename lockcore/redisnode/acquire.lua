-- acquire.lua: take a free lock and mint this node's fencing token from the
-- slot's counter, or refresh the TTL of a lock the lease already holds.
-- KEYS[1] lock hash     lockgate:{resource}:lock (fields lease, tok, owner,
--                       ttl, by = the replica it was granted for, x = wanted
--                       elsewhere)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id   ARGV[2] ttl in ms   ARGV[3] owner label
-- ARGV[4] replica id of the asking gateway (may be empty)
-- ARGV[5] '1' when the asker will wait if refused, else '0'
-- Returns {1, token} granted (counter incremented), {2, token} re-entered
-- (the token stored for the lease), {0, pttl} held by another lease, {-9, 0}
-- the node is out of service (nothing changed). A refusal of a waiting asker
-- for another replica than the holder's sets x once (handoff.lua then will
-- not pass the lock on within the holder's replica). A missing by counts as
-- the empty replica.
-- A grant publishes on lockgate:{resource}:acquired (KEYS[1] with its
-- trailing 'lock' replaced: same hash tag, no key of its own), payload the
-- new token in decimal (never the lease id), in the same atomic step as the
-- HSET; a re-entry and a refusal publish nothing.
if slotout(KEYS[2]) then
  return {-9, 0}
end
local h = redis.call('HMGET', KEYS[1], 'lease', 'by', 'x')
local holder = h[1]
if not holder then
  local tok = redis.call('HINCRBY', KEYS[2], 'n', 1)
  redis.call('HSET', KEYS[1], 'lease', ARGV[1], 'tok', string.format('%d', tok), 'owner', ARGV[3], 'ttl', ARGV[2], 'by', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'acquired', string.format('%d', tok))
  return {1, tok}
end
if holder == ARGV[1] then
  redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, tonumber(redis.call('HGET', KEYS[1], 'tok'))}
end
if ARGV[5] == '1' and (h[2] or '') ~= ARGV[4] and not h[3] then
  redis.call('HSET', KEYS[1], 'x', '1')
end
return {0, redis.call('PTTL', KEYS[1])}
