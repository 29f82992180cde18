package redisnode

import (
	"strings"
	"testing"
)

func TestShardedPubSubVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"7.0.0", true}, {"7.2.4", true}, {"8.0.1", true}, {"10.0.0", true},
		{"6.2.14", false}, {"5.0.7", false}, {"", false}, {"unknown", false},
	} {
		if got := shardedPubSubVersion(tc.version); got != tc.want {
			t.Errorf("shardedPubSubVersion(%q) = %v, want %v", tc.version, got, tc.want)
		}
	}
}

// Every script that announces has a sharded variant that announces the
// same messages with SPUBLISH and nothing else changed; the others have
// none.
func TestShardedScriptsPublishOnTheShard(t *testing.T) {
	publishing := 0
	for hash, src := range scriptSources {
		v := shardedScripts[hash]
		n := strings.Count(src, "redis.call('PUBLISH'")
		if n == 0 {
			if v != nil {
				t.Errorf("a script that publishes nothing has a sharded variant")
			}
			continue
		}
		publishing++
		if v == nil {
			t.Fatalf("a script with %d PUBLISH has no sharded variant", n)
		}
		sh := scriptSources[v.Hash()]
		if strings.Contains(sh, "'PUBLISH'") || strings.Count(sh, "redis.pcall('SPUBLISH'") != n {
			t.Errorf("sharded variant publishes %d times with SPUBLISH, want %d, and no PUBLISH", strings.Count(sh, "redis.pcall('SPUBLISH'"), n)
		}
		if strings.ReplaceAll(sh, "redis.pcall('SPUBLISH'", "redis.call('PUBLISH'") != src {
			t.Error("sharded variant differs from its script in more than the publish command")
		}
	}
	// Acquire, release and hand-off announce; a force release announces
	// through the release of its hold (release.lua).
	if publishing != 3 {
		t.Errorf("%d scripts publish, want 3", publishing)
	}
}
