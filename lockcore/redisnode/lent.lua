-- lent.lua: read a quarantined node's fencing counters for another node's
-- recovery after a restart of a majority (lockcore.Rejoiner.Lent; rule 8
-- of lockcore's doc), whether its slots are marked or not.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- KEYS[2..] slot counter hashes  lockgate:{tag}:tokens (see guard.lua), or
--         none: then it only checks
-- ARGV[1] the epoch of the quarantine the check found
-- Reads only while the node is quarantined with that epoch, every slot
-- marked, by the very process the quarantine was begun for (the run id
-- in qrid is the one that answers): a restart or a restore since, or a
-- new quarantine, and it returns false. Otherwise it returns the counters
-- (decimal, '' for a slot without one), after a first value 'ok'.
local m = redis.call('HMGET', KEYS[1], 'qepoch', 'qrid', 'qdone', 'qsince')
local info = redis.call('INFO', 'server')
local rid = string.match(info, 'run_id:(%x+)') or ''
if m[1] ~= ARGV[1] or not m[3] or not m[4] or rid == '' or string.match(m[2] or '', '^([^|]*)') ~= rid then
  return false
end
local out = {'ok'}
for i = 2, #KEYS do
  out[i] = redis.call('HGET', KEYS[i], 'n') or ''
end
return out
