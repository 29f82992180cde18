-- serve.lua: the last step of a repair, once every slot is repaired: the
-- node is initialized and out of quarantine.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- Sets init, clears qsince and qdone, lifts the beat (see lift.lua).
lift(KEYS[1])
redis.call('HSET', KEYS[1], 'init', '1')
redis.call('HDEL', KEYS[1], 'qsince', 'qdone')
return 1
