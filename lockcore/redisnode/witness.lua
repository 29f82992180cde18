-- witness.lua: record that a gateway found the node in service
-- (lockcore.Rejoiner.Witness; rule 8 of lockcore's doc).
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- KEYS[2] witness hash  lockgate:{meta}:wit (see check.lua)
-- ARGV[1] '1' when the check that found it in service found it durable
--         (appendonly yes, appendfsync always), '0' otherwise
-- ARGV[2] an id for the node's data, used only when it has none (a node
--         served by a gateway before nid)
-- ARGV[3..] pairs: another node's nid, the sat the gateway saw it with
-- Acts only on the process the node's data is in service for (rid is the
-- run id that answers, init set, no quarantine under way): a process that
-- took over since the check is left as it is. Raises sat to the node's
-- clock in ms, and always by one; sets dur to '0' for good when ARGV[1] is
-- '0', to '1' when unset; raises each witness. Never lowers anything.
-- Returns 1 when it acted, 0 otherwise.
local m = redis.call('HMGET', KEYS[1], 'init', 'rid', 'qsince', 'sat', 'dur', 'nid')
local info = redis.call('INFO', 'server')
local rid = string.match(info, 'run_id:(%x+)') or ''
if not m[1] or m[2] ~= rid or rid == '' or m[3] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sat = math.max(tonumber(m[4] or '0') + 1, now)
redis.call('HSET', KEYS[1], 'sat', string.format('%d', sat))
if ARGV[1] == '0' then
  redis.call('HSET', KEYS[1], 'dur', '0')
elseif not m[5] then
  redis.call('HSET', KEYS[1], 'dur', '1')
end
if not m[6] then
  redis.call('HSET', KEYS[1], 'nid', ARGV[2])
end
for i = 3, #ARGV - 1, 2 do
  local old = tonumber(redis.call('HGET', KEYS[2], ARGV[i]) or '0')
  local v = tonumber(ARGV[i + 1])
  if v > old then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  end
end
return 1
