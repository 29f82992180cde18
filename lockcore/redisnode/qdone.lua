-- qdone.lua: the last step of a quarantine, once every slot is marked.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the quarantine's epoch (see quarantine.lua)
-- Sets qdone and returns 1 if the quarantine is still the node's latest
-- (qepoch = ARGV[1]); otherwise a later quarantine is marking the slots and
-- sets qdone itself, and this changes nothing and returns 0.
if redis.call('HGET', KEYS[1], 'qepoch') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'qdone', '1')
return 1
