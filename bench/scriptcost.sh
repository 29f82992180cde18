#!/usr/bin/env bash
# scriptcost.sh: the Redis server's CPU per command for lockgate's lock
# scripts against the commands redsync and redislock send, on one
# redis-server of its own (persisting nothing), with redis-benchmark: 16
# clients, 200,000 commands per case, pipelines of 1 and 16, random keys.
# Server CPU is used_cpu_user + used_cpu_sys from INFO cpu, before and after.
# Run from anywhere: bash bench/scriptcost.sh [port]
set -euo pipefail
dir=$(cd "$(dirname "$0")/../lockcore/redisnode" && pwd)
port=${1:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
rc() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize yes --logfile /dev/null
trap 'rc SHUTDOWN NOSAVE >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do rc PING >/dev/null 2>&1 && break; sleep 0.1; done

acquire=$(rc SCRIPT LOAD "$(cat "$dir/guard.lua" "$dir/acquire.lua")")
release=$(rc SCRIPT LOAD "$(cat "$dir/guard.lua" "$dir/release.lua")")
rsrelease=$(rc SCRIPT LOAD 'if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end')
nothing=$(rc SCRIPT LOAD 'return 1')
cpu() { rc INFO cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.3f", s}'; }
n=200000
run() { # pipeline, name, command...
	local pipe=$1 name=$2 c0 c1
	shift 2
	rc FLUSHALL >/dev/null
	rc HSET 'lockgate:{t}:tokens' n 0 >/dev/null # the slot counter the guard wants
	c0=$(cpu)
	redis-benchmark -h 127.0.0.1 -p "$port" -n $n -c 16 -P "$pipe" -r 100000000 -q "$@" >/dev/null
	c1=$(cpu)
	printf '| %s | %d | %.1f |\n' "$name" "$pipe" "$(echo "($c1 - $c0) / $n * 1000000" | bc -l)"
}
echo '| command | pipeline | server CPU µs per command |'
echo '|---|---:|---:|'
for pipe in 1 16; do
	run "$pipe" 'SET NX PX (redsync, redislock acquire)' SET 'k:__rand_int__' v NX PX 10000
	run "$pipe" 'redsync release script, key absent' EVALSHA "$rsrelease" 1 'k:__rand_int__' v
	run "$pipe" 'EVALSHA of return 1' EVALSHA "$nothing" 0
	run "$pipe" 'lockgate acquire.lua, a first grant' EVALSHA "$acquire" 2 'lockgate:{__rand_int__}:lock' 'lockgate:{t}:tokens' 1 lease-0123456789abcdef 10000 owner replica 0
	run "$pipe" 'lockgate release.lua, lock absent' EVALSHA "$release" 3 'lockgate:{__rand_int__}:lock' 'lockgate:{t}:tokens' 'lockgate:{__rand_int__}:released' 1 lease-0123456789abcdef 0
done
