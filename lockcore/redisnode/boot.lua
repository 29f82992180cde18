-- boot.lua: record that a gateway begins to initialize the node as one of
-- a new cluster (lockcore.Node.MarkInitializing).
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] a new epoch: a random id
-- ARGV[2] the server process being marked ("<run id>|<replication id>",
--         process.go; a Cluster node's set of primaries): a repair serves
--         only that process (serve.lua)
-- On an initialized node (init set) it changes nothing and returns ''. On a
-- node already marked it returns that mark's epoch (gateways that
-- initialize a cluster together share it). Otherwise it sets qepoch to
-- ARGV[1] and boot to the node's time in ms, and returns ARGV[1]. The mark
-- goes with the node's data: a node that restarts empty has none, so a
-- gateway that finds it uninitialized in a cluster that is not new
-- quarantines it at once, and a repair begun with the lost mark's epoch
-- does nothing (repair.lua).
if redis.call('HEXISTS', KEYS[1], 'init') == 1 then
  return ''
end
local e = redis.call('HGET', KEYS[1], 'qepoch')
if e then
  return e
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'qepoch', ARGV[1], 'brid', ARGV[2], 'boot', string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
return ARGV[1]
