-- guard.lua: prepended to every script that reads or writes a lock.
-- slotout(key, protect) reports whether the node may not serve the slot
-- whose counter hash is key (lockgate:{tag}:tokens, fields n = the counter,
-- q = '1' while the node is quarantined). A missing hash means the node lost
-- its data or was never initialized; it is then out, unless protect is '0'
-- (the test-only unprotected mode), which creates the counter at 0.
local function slotout(key, protect)
  local v = redis.call('HMGET', key, 'n', 'q')
  if v[2] then
    return true
  end
  if not v[1] then
    if protect == '1' then
      return true
    end
    redis.call('HSET', key, 'n', 0)
  end
  return false
end
