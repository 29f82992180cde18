-- serve.lua: the last step of a repair, once every slot is repaired (and,
-- for a recovery, the other nodes' locks taken in): the node is initialized,
-- out of quarantine, and recovered for the server process that answers.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the epoch the repair was decided on (see lockcore.Node.Repair)
-- ARGV[2] the run id of the server process the repair was decided for
-- ARGV[3] the data format version this gateway writes
-- ARGV[4] "<run id>|<replication id>" of that process (see check.lua,
--         rrepl; process.go); '' or none for a node that keeps no rrepl
--         (a Cluster)
-- If the epoch is no longer ARGV[1] (a quarantine began since, the node was
-- marked again, or it lost its data), it changes nothing and returns 0: a
-- quarantine's marks stand, and so does its start. Otherwise it sets init,
-- rid = ARGV[2], fmt = ARGV[3] and rrepl = ARGV[4] (deleted when none),
-- clears qsince, qrid, qdone and boot, returns 1. A process other than ARGV[2]
-- that holds this data (it restarted meanwhile, from whatever copy) is not
-- the one named by rid, and is recovered again before it serves.
if redis.call('HGET', KEYS[1], 'qepoch') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'init', '1', 'rid', ARGV[2], 'fmt', ARGV[3])
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'rrepl', ARGV[4])
else
  redis.call('HDEL', KEYS[1], 'rrepl')
end
redis.call('HDEL', KEYS[1], 'qsince', 'qdone', 'boot', 'qrid')
return 1
