package redisnode

import (
	"errors"
	"strings"
	"testing"
)

// redisErr is a reply error as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// shardVerdict, row by row: a check's write on a primary that the Cluster
// did not run (it sees no majority, it no longer serves the slot, the slot
// is changing hands, it is loading) fails the check instead of passing the
// shard; only ASK (the beat key left its slot, the primary still serves
// it) passes.
func TestShardVerdict(t *testing.T) {
	const ok = "role:master\r\nmaxmemory_policy:noeviction\r\nused_memory:100\r\nmaxmemory:0\r\n"
	cases := []struct {
		name     string
		info     string
		err      error
		refusing string // a word of the reason, "" for none
		failed   bool
	}{
		{"written", ok, nil, "", false},
		{"ASK: the slot migrates", ok, redisErr("ASK 12 127.0.0.1:7001"), "", false},
		{"CLUSTERDOWN", ok, redisErr("CLUSTERDOWN The cluster is down"), "", true},
		{"MOVED", ok, redisErr("MOVED 12 127.0.0.1:7001"), "", true},
		{"TRYAGAIN", ok, redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), "", true},
		{"LOADING", ok, redisErr("LOADING Redis is loading the dataset in memory"), "", true},
		{"a lost reply", ok, errors.New("i/o timeout"), "", true},
		{"OOM", ok, redisErr("OOM command not allowed"), "memory", false},
		{"evicting", strings.Replace(ok, "noeviction", "allkeys-lru", 1), nil, "evicts", false},
		{"full", strings.Replace(ok, "maxmemory:0", "maxmemory:1000", 1), nil, "memory", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusing, failed := shardVerdict("a:1", tc.info, nodeSettings{policy: infoString(tc.info, "maxmemory_policy"), debug: "no", backlogTTL: "0"}, tc.err)
			if failed != tc.failed || (tc.refusing == "") != (refusing == "") || !strings.Contains(refusing, tc.refusing) {
				t.Fatalf("shardVerdict = %q, %v; want refusing with %q, failed %v", refusing, failed, tc.refusing, tc.failed)
			}
		})
	}
}
