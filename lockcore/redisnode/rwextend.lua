-- rwextend.lua: reset the TTL of the lease's hold on a readers-writer lock.
-- KEYS[1] rw hash  lockgate:{name}:rw (see rwlib.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id   ARGV[2] ttl in ms, or 0 for the TTL last set
-- Returns {1, token, ttl} extended, {-1, 0} the lease holds nothing here,
-- {0, pttl} a hold of a conflicting mode is here too (adopted copies that
-- disagree: held for neither, rule R6), {-9, 0} the node is out of
-- service. Only {1, ...} changes anything.
if slotout(KEYS[2]) then
  return {-9, 0}
end
local now = rwnow()
local holds = rwread(KEYS[1], now)
for _, h in ipairs(holds) do
  if h.lease == ARGV[1] then
    if rwconflicts(holds, h) then
      return {0, h.exp - now}
    end
    if ARGV[2] ~= '0' then
      h.ttl = tonumber(ARGV[2])
    end
    h.exp = now + h.ttl
    rwput(KEYS[1], h)
    rwtouch(KEYS[1], now)
    return {1, h.tok, h.ttl}
  end
end
return {-1, 0}
