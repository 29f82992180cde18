// Package bench holds lockgate's comparative benchmarks. It is a separate Go
// module so that the peers it compares against (redsync) never become
// dependencies of the gateway module.
//
// BenchmarkHandoff (handoff_test.go) puts 1, 16 and 64 contenders on one
// resource, each holding the lock about 1 ms and then asking again, for
// lockgate over HTTP and for redsync, on the same three redis-server
// processes, and for lockgate over its embedded in-memory store, which shows
// what the HTTP hops alone cost. TestReport runs every case in one go and
// prints the markdown table recorded in BENCHMARKS.md at the repository root:
//
//	cd bench && LOCKGATE_BENCH_REPORT=1 go test -run TestReport -v -timeout 20m
//	cd bench && go test -run '^$' -bench Handoff -benchtime 1x -timeout 20m
//
// LOCKGATE_BENCH_WINDOW (a Go duration, default 5s) is the measuring window
// of each case and LOCKGATE_BENCH_WARMUP (default 1s) the unmeasured warm-up
// before it. LOCKGATE_BENCH_HOLD=sleep holds the lock with time.Sleep(1ms)
// instead of 1 ms on the clock (handoff_test.go says why the default is not
// time.Sleep), and LOCKGATE_BENCH_HOLD=spin with 1 ms on the clock that never
// yields the processor.
//
// TestThroughput (throughput_test.go, etcd_test.go) compares uncontended
// throughput (C = 1, 16, 64, each worker on its own resource), contended
// acquisition (C = 16, 64 on one resource, the hand-off bench's cases) and
// the memory of 100,000 held locks for lockgate over HTTP on three Redis
// nodes, on one and on the embedded store, redsync on the three nodes,
// bsm/redislock on one, http-floor (an HTTP lock server that does no lock
// work, floor_test.go: what HTTP alone allows here, a bound on every lock
// served over it), and etcd's /v3/lock JSON API on one etcd member
// (started when the etcd binary is installed; its rows say "not installed"
// otherwise). It interleaves the targets in LOCKGATE_BENCH_ROUNDS rounds
// (default 3) and prints the tables and ratios of BENCHMARKS.md's
// throughput section:
//
//	cd bench && LOCKGATE_BENCH_THROUGHPUT=1 go test -run TestThroughput -v -count=1 -timeout 40m
//
// LOCKGATE_BENCH_HELD (default 100000) is the number of locks held in the
// memory scenario, LOCKGATE_BENCH_TARGETS (comma-separated) a subset of
// the targets, and LOCKGATE_BENCH_ETCD_ARGS extra etcd arguments.
//
// TestUIOverhead (uioverhead_test.go) compares the gateway's uncontended
// throughput with its web page (/ui/) open in a headless Chromium and
// closed: the gateway binary on the three servers with 10,000 locks held
// (LOCKGATE_BENCH_HELD), 16 workers (LOCKGATE_BENCH_UI_C), the two arms
// alternating over LOCKGATE_BENCH_ROUNDS rounds. It prints pairs per second
// per arm, their ratio, the gateway's CPU per 1,000 pairs and the browser's
// CPU. It needs chromium; run it on a quiet machine:
//
//	cd bench && LOCKGATE_BENCH_UI=1 go test -run TestUIOverhead -v -count=1 -timeout 20m
package bench
