-- mark.lua: mark one slot quarantined, for the quarantine of epoch ARGV[1].
-- KEYS[1] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- KEYS[2] meta hash     lockgate:{meta}:node (see check.lua)
-- ARGV[1] the quarantine's epoch (see quarantine.lua)
-- Sets the slot's q and returns 1 while the node's epoch is ARGV[1];
-- otherwise changes nothing and returns 0: a later quarantine marks the
-- slots itself, and a mark sent late (its gateway paused) must not land on
-- a node that has been repaired since.
if redis.call('HGET', KEYS[2], 'qepoch') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'q', '1')
return 1
