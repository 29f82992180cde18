-- serve.lua: the last step of a repair, once every slot is repaired: the
-- node is initialized and out of quarantine.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the epoch the repair was decided on (see lockcore.Node.Repair)
-- If the epoch is no longer ARGV[1] (a quarantine began since, the node was
-- marked again, or it lost its data), it changes nothing and returns 0: a
-- quarantine's marks stand, and so does its start. Otherwise it sets init, clears qsince,
-- qdone and boot, lifts the beat (see lift.lua) and returns 1.
if redis.call('HGET', KEYS[1], 'qepoch') ~= ARGV[1] then
  return 0
end
lift(KEYS[1])
redis.call('HSET', KEYS[1], 'init', '1')
redis.call('HDEL', KEYS[1], 'qsince', 'qdone', 'boot')
return 1
