-- rwrelease.lua: delete the lease's hold on a readers-writer lock, and its
-- waiting writer's mark, held or not.
-- KEYS[1] rw hash  lockgate:{name}:rw (see rwlib.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id
-- Returns {1, token} released, {-1, 0} the lease held nothing here (its
-- mark, if any, is gone all the same), {-9, 0} the node is out of service
-- (nothing changed).
if slotout(KEYS[2]) then
  return {-9, 0}
end
local now = rwnow()
local holds, mark = rwread(KEYS[1], now)
if mark and mark.lease == ARGV[1] then
  redis.call('HDEL', KEYS[1], '~')
end
local tok = -1
for _, h in ipairs(holds) do
  if h.lease == ARGV[1] then
    redis.call('HDEL', KEYS[1], h.f)
    if h.tok > tok then
      tok = h.tok
    end
  end
end
rwtouch(KEYS[1], now)
if tok < 0 then
  return {-1, 0}
end
return {1, tok}
