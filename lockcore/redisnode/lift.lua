-- lift.lua: prepended to quarantine.lua and serve.lua.
-- lift(meta) raises the node's beat to the node's time in ms and returns that
-- time. After a loss the beat starts again from 1; lifted, it is above every
-- beat a gateway saw before the loss (beats grow a few per second, time a
-- thousand), so that only a node that went back to an older copy since
-- shows a beat lower than one seen before.
local function lift(meta)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local b = tonumber(redis.call('HGET', meta, 'beat') or '0')
  if b < now then
    redis.call('HSET', meta, 'beat', string.format('%d', now))
  end
  return now
end
