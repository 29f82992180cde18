-- rwinspect.lua: read a readers-writer lock's live holds and mark.
-- KEYS[1] rw hash  lockgate:{name}:rw (see rwlib.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- Returns {-9} when the node is out of service, else {waiting, then for
-- each hold: exclusive (1 or 0), lease, token, owner, ttl, remaining ms},
-- waiting 1 while a writer's mark is live, else 0. It deletes expired
-- fields, nothing else.
if slotout(KEYS[2]) then
  return {-9}
end
local now = rwnow()
local holds, mark = rwread(KEYS[1], now)
local out = {0}
if mark then
  out[1] = 1
end
for _, h in ipairs(holds) do
  local excl = 0
  if h.excl then
    excl = 1
  end
  out[#out + 1] = excl
  out[#out + 1] = h.lease
  out[#out + 1] = h.tok
  out[#out + 1] = h.owner
  out[#out + 1] = h.ttl
  out[#out + 1] = h.exp - now
end
return out
