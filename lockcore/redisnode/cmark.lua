-- cmark.lua: mark one slot of a Redis Cluster node (cluster.go) for an
-- epoch. The slot's counter hash carries the epoch itself (field qepoch),
-- since a Cluster script cannot read the meta hash, which lives in
-- another slot.
-- KEYS[1] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] the epoch: 20 digits of cseq.lua, '-', a random id, so that
--         later epochs compare greater as strings
-- ARGV[2] 'q' for a quarantine, 'b' for a bootstrap mark
-- A quarantine sets q (the slot refuses every lock script) and raises
-- qepoch to ARGV[1] unless the slot already carries a later epoch: a mark
-- sent late never undoes a later quarantine's. A bootstrap mark acts only
-- on a slot that has no hash at all (a new node): it sets q and qepoch,
-- and never touches a slot a repair already initialized. Returns 1.
if ARGV[2] == 'b' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 1
  end
  redis.call('HSET', KEYS[1], 'q', '1', 'qepoch', ARGV[1])
  return 1
end
redis.call('HSET', KEYS[1], 'q', '1')
if (redis.call('HGET', KEYS[1], 'qepoch') or '') < ARGV[1] then
  redis.call('HSET', KEYS[1], 'qepoch', ARGV[1])
end
return 1
