-- rwacquire.lua: grant a reader's or a writer's hold on a readers-writer
-- lock (rule R1 of lockcore's doc), minting this node's token from the
-- slot's counter, or refresh the hold the lease has in that mode.
-- KEYS[1] rw hash       lockgate:{name}:rw (see rwlib.lua)
-- KEYS[2] slot counter  lockgate:{tag}:tokens (see guard.lua)
-- ARGV[1] lease id   ARGV[2] ttl in ms   ARGV[3] owner label
-- ARGV[4] '1' for the writer's hold, '0' for a reader's
-- ARGV[5] '1' when the asker waits if refused   ARGV[6] mark lifetime in ms
-- Returns {1, token} granted (counter incremented), {2, token} re-entered
-- (TTL reset), {-2, token} the lease holds in the other mode (nothing
-- changed), {0, pttl} refused (the longest remaining time of what refused
-- it), {-9, 0} the node is out of service. A reader is refused beside a
-- writer or another lease's live mark; a writer beside any hold. A waiting
-- writer refused sets or renews its mark unless another lease's is live
-- (rule R4); its grant clears it.
if slotout(KEYS[2]) then
  return {-9, 0}
end
local now = rwnow()
local holds, mark = rwread(KEYS[1], now)
local lease, ttl, excl = ARGV[1], tonumber(ARGV[2]), ARGV[4] == '1'
local own, other, longest, writer = nil, nil, 0, false
for _, h in ipairs(holds) do
  if h.lease == lease then
    if h.excl == excl then
      own = h
    else
      other = h
    end
  end
  if h.exp - now > longest then
    longest = h.exp - now
  end
  writer = writer or h.excl
end
if own then
  if rwconflicts(holds, own) then
    return {0, longest}
  end
  own.ttl, own.exp = ttl, now + ttl
  rwput(KEYS[1], own)
  rwtouch(KEYS[1], now)
  return {2, own.tok}
end
if other then
  return {-2, other.tok}
end
local free = #holds == 0
if not excl then
  free = not writer
  if mark and mark.lease ~= lease then
    free = false
    if mark.exp - now > longest then
      longest = mark.exp - now
    end
  end
end
if free then
  local tok = redis.call('HINCRBY', KEYS[2], 'n', 1)
  local mode = 'r'
  if excl then
    mode = 'w'
  end
  rwput(KEYS[1], {f = mode .. lease, tok = tok, ttl = ttl, exp = now + ttl, owner = ARGV[3]})
  if mark and mark.lease == lease then
    redis.call('HDEL', KEYS[1], '~')
  end
  rwtouch(KEYS[1], now)
  return {1, tok}
end
if excl and ARGV[5] == '1' and tonumber(ARGV[6]) > 0 and (not mark or mark.lease == lease) then
  redis.call('HSET', KEYS[1], '~', string.format('%d|', now + tonumber(ARGV[6])) .. lease)
  rwtouch(KEYS[1], now)
end
return {0, longest}
