-- force.lua: delete a lock whatever lease holds it, and announce the release
-- as release.lua does. The fencing counter is not touched.
-- KEYS[1] lock hash  lockgate:{resource}:lock
-- Returns {1, token} released, {-1, 0} not held. The PUBLISH, on
-- lockgate:{resource}:released as in release.lua (payload: the released
-- token in decimal), happens in the same atomic step as the DEL.
local tok = redis.call('HGET', KEYS[1], 'tok')
if not tok then
  return {-1, 0}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'released', tok)
return {1, tonumber(tok)}
