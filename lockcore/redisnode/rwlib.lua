-- rwlib.lua: prepended (after guard.lua where a script serves a lock) to
-- the readers-writer scripts. A readers-writer lock is one hash,
-- lockgate:{name}:rw, in the slot of the name's counter:
--   field 'r'..lease or 'w'..lease, one per hold (a reader's, a writer's):
--         'exp|tok|ttl|owner', exp the hold's expiry in ms on the server's
--         clock (TIME), ttl the TTL it was last set with;
--   field '~', the waiting writer's mark: 'exp|lease' ('~' is no lease).
-- Expired fields are dropped by the next script that reads the hash, and
-- the hash itself expires with its latest field (rwtouch), so a lock whose
-- holders went away costs nothing.
local function rwnow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- rwread returns the live holds of the hash key (a list of {f, excl,
-- lease, tok, ttl, exp, owner}) and the live mark ({lease, exp} or nil),
-- deleting the expired fields.
local function rwread(key, now)
  local all = redis.call('HGETALL', key)
  local holds, mark, dead = {}, nil, {}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == '~' then
      local exp, lease = string.match(v, '^(%d+)|(.*)$')
      if tonumber(exp) > now then
        mark = {lease = lease, exp = tonumber(exp)}
      else
        dead[#dead + 1] = f
      end
    else
      local exp, tok, ttl, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
      if tonumber(exp) > now then
        holds[#holds + 1] = {f = f, excl = string.sub(f, 1, 1) == 'w', lease = string.sub(f, 2),
          tok = tonumber(tok), ttl = tonumber(ttl), exp = tonumber(exp), owner = owner}
      else
        dead[#dead + 1] = f
      end
    end
  end
  if #dead > 0 then
    redis.call('HDEL', key, unpack(dead))
  end
  return holds, mark
end
local function rwput(key, h)
  redis.call('HSET', key, h.f, string.format('%d|%d|%d|', h.exp, h.tok, h.ttl) .. h.owner)
end
-- rwtouch makes the hash live as long as its latest field.
local function rwtouch(key, now)
  local last = 0
  for _, v in ipairs(redis.call('HVALS', key)) do
    local exp = tonumber(string.match(v, '^(%d+)'))
    if exp > last then
      last = exp
    end
  end
  if last > now then
    redis.call('PEXPIRE', key, last - now)
  else
    redis.call('DEL', key)
  end
end
-- rwconflicts reports whether another hold of holds excludes h (a writer
-- against any other hold): only adopted copies that disagree make that.
local function rwconflicts(holds, h)
  for _, g in ipairs(holds) do
    if g.f ~= h.f and (h.excl or g.excl) then
      return true
    end
  end
  return false
end
