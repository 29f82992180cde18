-- fence.lua: admit a fencing token for a resource and, optionally, write a
-- value under a key in the same atomic step. Redis runs a script without
-- interleaving any other command, so no write can slip between the check and
-- the update.
--
-- KEYS[1]  fence key of the resource, e.g. "fencing:{orders}:token". A plain
--          string holding the highest admitted token in decimal. It must
--          never expire or be deleted.
-- KEYS[2]  optional data key, e.g. "fencing:{orders}:value". A hash with the
--          fields "value", "token" and "resource". Omit it to only admit.
-- ARGV[1]  the token: a decimal integer in 1..2^53-1 without sign or
--          leading zeros.
-- ARGV[2]  the value to store (only with KEYS[2]).
-- ARGV[3]  the resource name recorded with the value (only with KEYS[2]).
--
-- Returns {1, token} when the token is admitted (greater than or equal to
-- the stored one; the fence is raised and the value written), or
-- {0, highest} when it is stale (nothing written). Both tokens are returned
-- as decimal strings. Errors: "fencing: invalid token" for a malformed
-- ARGV[1], "fencing: corrupt fence" if KEYS[1] does not hold a number.
--
-- Lua numbers are doubles. Every integer below 2^53 is exact in a double,
-- so tonumber and < compare tokens exactly; the fence is stored as the
-- caller's string, never as a formatted double (which could come out as
-- "1e+15").

local token = ARGV[1]
if #token > 16 or not string.match(token, '^[1-9][0-9]*$') then
  return redis.error_reply('fencing: invalid token')
end
local t = tonumber(token)
if t > 9007199254740991 then
  return redis.error_reply('fencing: invalid token')
end

local stored = redis.call('GET', KEYS[1])
if stored then
  local highest = tonumber(stored)
  if highest == nil then
    return redis.error_reply('fencing: corrupt fence')
  end
  if t < highest then
    return {0, stored}
  end
  if t > highest then
    redis.call('SET', KEYS[1], token)
  end
else
  redis.call('SET', KEYS[1], token)
end

if #KEYS >= 2 then
  redis.call('HSET', KEYS[2], 'value', ARGV[2], 'token', token, 'resource', ARGV[3])
end
return {1, token}
