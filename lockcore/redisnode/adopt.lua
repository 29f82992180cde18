-- adopt.lua: take in locks other nodes hold, while this node recovers
-- (lockcore.Adopter), many in one call.
-- KEYS[1] the hash that holds the node's epoch (field qepoch): the meta
--         hash lockgate:{meta}:node (see check.lua), or for a Cluster the
--         slot counter hash of the locks' slot (every lock of the call is
--         then in that slot, see Quarantine)
-- KEYS[2..] lock hashes  lockgate:{resource}:lock (see acquire.lua)
-- ARGV[1] the epoch of the quarantine the recovery was decided on
-- ARGV[5k-3..5k+1], for the lock KEYS[k+1] (k = 1, 2, ...): lease id,
--         token, owner, ttl in ms, and the remaining time to live in ms
--         as the other node had it
-- Returns 0, changing nothing, when the node's epoch is no longer ARGV[1].
-- Otherwise, for each lock: a free lock becomes held for the lease; a lock
-- held for the same lease keeps it; a lock held for another lease (two
-- copies disagree) becomes held for nobody ('~' is no lease id), so that
-- neither lease can extend or take it here until it expires. The token
-- becomes the larger, and the lock lives at least its remaining time
-- more. Returns 1.
if redis.call('HGET', KEYS[1], 'qepoch') ~= ARGV[1] then
  return 0
end
for k = 2, #KEYS do
  local key, a = KEYS[k], 5 * (k - 2) + 1
  local lease, tok, remaining = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 5])
  local h = redis.call('HMGET', key, 'lease', 'tok')
  if not h[1] then
    redis.call('HSET', key, 'lease', lease, 'tok', tok, 'owner', ARGV[a + 3], 'ttl', ARGV[a + 4])
    redis.call('PEXPIRE', key, remaining)
  else
    if h[1] ~= lease then
      redis.call('HSET', key, 'lease', '~')
    end
    if tonumber(h[2] or '0') < tonumber(tok) then
      redis.call('HSET', key, 'tok', tok)
    end
    if redis.call('PTTL', key) < remaining then
      redis.call('PEXPIRE', key, remaining)
    end
  end
end
return 1
