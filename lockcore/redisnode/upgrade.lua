-- upgrade.lua: take over a node that an earlier lockgate kept in service.
-- KEYS[1] meta hash  lockgate:{meta}:node (see check.lua)
-- ARGV[1] the run id of the server process that answers
-- ARGV[2] the data format version this gateway writes
-- A record in the earlier format (data format 1: no fmt and no rid, judged
-- by heartbeats) that is initialized and not quarantined names the process
-- that answers now: rid = ARGV[1], fmt = ARGV[2], and 1 is returned. Any
-- other record is left as it is and 0 returned.
if redis.call('HEXISTS', KEYS[1], 'init') == 1 and redis.call('HEXISTS', KEYS[1], 'fmt') == 0
  and redis.call('HEXISTS', KEYS[1], 'rid') == 0 and redis.call('HEXISTS', KEYS[1], 'qsince') == 0 then
  redis.call('HSET', KEYS[1], 'rid', ARGV[1], 'fmt', ARGV[2])
  return 1
end
return 0
