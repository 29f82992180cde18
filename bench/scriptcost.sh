#!/usr/bin/env bash
# scriptcost.sh: the Redis server's CPU per command for lockgate's lock
# scripts against what redsync and redislock send, on one redis-server of
# its own (on a unix socket in a temporary directory, persisting nothing),
# with redis-benchmark: 16 clients, 200,000 commands per case, pipelines of
# 1 and 16, random keys. Server CPU is used_cpu_user + used_cpu_sys from
# INFO cpu, before and after each case. Needs redis-server, redis-cli,
# redis-benchmark and bc. Run from anywhere: bash bench/scriptcost.sh
set -euo pipefail
scripts=$(cd "$(dirname "$0")/../lockcore/redisnode" && pwd)
tmp=$(mktemp -d)
sock=$tmp/redis.sock
rc() { redis-cli -s "$sock" "$@"; }
cleanup() {
	rc SHUTDOWN NOSAVE >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no \
	--daemonize yes --pidfile "$tmp/pid" --logfile "$tmp/log" --dir "$tmp"
for _ in $(seq 50); do
	rc PING >/dev/null 2>&1 && break
	sleep 0.1
done
rc PING >/dev/null || { echo "redis-server did not start: $(cat "$tmp/log")" >&2; exit 1; }

load() { rc SCRIPT LOAD "$1"; }
acquire=$(load "$(cat "$scripts/guard.lua" "$scripts/acquire.lua")")
release=$(load "$(cat "$scripts/guard.lua" "$scripts/release.lua")")
# redsync v4.18.1's deleteScript and bsm/redislock v0.9.4's luaObtain, as
# those versions (bench/go.mod) send them.
rsdelete=$(load 'local val = redis.call("GET", KEYS[1])
if val == ARGV[1] then return redis.call("DEL", KEYS[1]) elseif val == false then return -1 else return 0 end')
rlobtain=$(load 'if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end
local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end')
nothing=$(load 'return 1')

fresh() {
	rc FLUSHALL >/dev/null
	rc HSET 'lockgate:{t}:tokens' n 0 >/dev/null # the slot counter the guard wants
}
# The commands answer what they should before they are timed
# (redis-benchmark counts error replies as commands).
fresh
[ "$(rc EVALSHA "$acquire" 2 'lockgate:{x}:lock' 'lockgate:{t}:tokens' lease-0123456789abcdef 10000 owner replica 0 | tr '\n' ' ')" = "1 1 " ] ||
	{ echo "acquire.lua did not grant token 1" >&2; exit 1; }
[ "$(rc EVALSHA "$release" 3 'lockgate:{x}:lock' 'lockgate:{t}:tokens' 'lockgate:{x}:released' lease-0123456789abcdef 0 | tr '\n' ' ')" = "1 1 0 " ] ||
	{ echo "release.lua did not release" >&2; exit 1; }
[ "$(rc EVALSHA "$rlobtain" 1 k v 1 10000)" = "OK" ] || { echo "redislock's obtain did not obtain" >&2; exit 1; }
[ "$(rc EVALSHA "$rsdelete" 1 k v)" = "1" ] || { echo "redsync's delete did not delete" >&2; exit 1; }

cpu() { rc INFO cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}'; }
n=200000
run() { # pipeline, label, command...
	local pipe=$1 label=$2 c0 c1
	shift 2
	fresh
	c0=$(cpu)
	redis-benchmark -s "$sock" -n $n -c 16 -P "$pipe" -r 100000000 -q "$@" >/dev/null
	c1=$(cpu)
	printf '| %s | %d | %.1f |\n' "$label" "$pipe" "$(echo "($c1 - $c0) / $n * 1000000" | bc -l)"
}
echo '| command | pipeline | server CPU µs per command |'
echo '|---|---:|---:|'
for pipe in 1 16; do
	run "$pipe" 'EVALSHA of return 1' EVALSHA "$nothing" 0
	run "$pipe" 'SET NX PX (redsync acquire)' SET 'k:__rand_int__' v NX PX 10000
	run "$pipe" 'redislock obtain script, a first grant' EVALSHA "$rlobtain" 1 'k:__rand_int__' v 1 10000
	run "$pipe" 'lockgate acquire.lua, a first grant' EVALSHA "$acquire" 2 'lockgate:{__rand_int__}:lock' 'lockgate:{t}:tokens' lease-0123456789abcdef 10000 owner replica 0
	run "$pipe" 'redsync delete script, key absent' EVALSHA "$rsdelete" 1 'k:__rand_int__' v
	run "$pipe" 'lockgate release.lua, lock absent' EVALSHA "$release" 3 'lockgate:{__rand_int__}:lock' 'lockgate:{t}:tokens' 'lockgate:{__rand_int__}:released' lease-0123456789abcdef 0
done
