-- boot.lua: record that a gateway begins to initialize the node as one of
-- a new cluster (lockcore.Node.MarkInitializing).
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- On a node that is not initialized (no init), sets boot to the node's time
-- in ms and returns 1; on an initialized one it changes nothing and returns
-- 0. The mark goes with the node's data: a node that restarts empty has
-- none, so a gateway that finds it uninitialized in a cluster that is not
-- new quarantines it at once.
if redis.call('HEXISTS', KEYS[1], 'init') == 1 then
  return 0
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'boot', string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
return 1
