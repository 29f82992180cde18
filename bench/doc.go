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
package bench
