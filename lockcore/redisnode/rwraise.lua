-- rwraise.lua: raise the slot's fencing counter, and the token of the
-- lease's hold on a readers-writer lock, to a token minted from another
-- node's counter (step 3 of lockcore's doc). Never lowers anything.
-- KEYS[1] rw hash  lockgate:{name}:rw (see rwlib.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] token   ARGV[2] lease id
-- Returns {1, counter} with the counter's value afterwards, or {-9, 0} when
-- the node is out of service (nothing changed).
if slotout(KEYS[2]) then
  return {-9, 0}
end
local tok = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[2], 'n'))
if cur < tok then
  redis.call('HSET', KEYS[2], 'n', ARGV[1])
  cur = tok
end
local now = rwnow()
for _, h in ipairs(rwread(KEYS[1], now)) do
  if h.lease == ARGV[2] and h.tok < tok then
    h.tok = tok
    rwput(KEYS[1], h)
  end
end
return {1, cur}
