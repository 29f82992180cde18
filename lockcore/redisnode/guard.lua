-- guard.lua: prepended to every script that reads or writes a lock.
-- slotout(key) reports whether the node may not serve the slot whose
-- counter hash is key (lockgate:{tag}:tokens, fields n = the counter, q =
-- '1' while the node is quarantined). A missing hash means the node lost
-- its data or was never initialized: the slot is then out.
local function slotout(key)
  local v = redis.call('HMGET', key, 'n', 'q')
  return v[2] ~= false or v[1] == false
end
