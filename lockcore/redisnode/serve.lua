-- serve.lua: the last step of a repair, once every slot is repaired: the
-- node is initialized and out of quarantine.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the quarantine epoch (qepoch, 0 when unset) the repair began in
-- If a quarantine began since (qepoch moved), it changes nothing and
-- returns 0: that quarantine's marks may have reached slots after the
-- repair cleared them, and its start stands. Otherwise it sets init,
-- clears qsince and qdone, lifts the beat (see lift.lua) and returns 1.
if tonumber(redis.call('HGET', KEYS[1], 'qepoch') or '0') ~= tonumber(ARGV[1]) then
  return 0
end
lift(KEYS[1])
redis.call('HSET', KEYS[1], 'init', '1')
redis.call('HDEL', KEYS[1], 'qsince', 'qdone')
return 1
