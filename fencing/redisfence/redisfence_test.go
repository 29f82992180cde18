package redisfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/fencingtest"
	"github.com/lockgate/lockgate/fencing/redisfence"
	"github.com/lockgate/lockgate/internal/redistest"
)

func newClient(t *testing.T) *redis.Client {
	t.Helper()
	srv := redistest.Start(t, nil)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestRedisConforms(t *testing.T) {
	fencingtest.Run(t, redisfence.New(newClient(t), nil))
}

func TestKeysCarryTheResourceAsHashTag(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		fence  string
		value  string
	}{
		{"default prefix", "", "fencing:{orders}:token", "fencing:{orders}:value"},
		{"own prefix", "app1:", "app1:{orders}:token", "app1:{orders}:value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := redisfence.New(nil, &redisfence.Options{Prefix: tt.prefix})
			if got := g.FenceKey("orders"); got != tt.fence {
				t.Errorf("FenceKey = %q, want %q", got, tt.fence)
			}
			if got := g.ValueKey("orders"); got != tt.value {
				t.Errorf("ValueKey = %q, want %q", got, tt.value)
			}
		})
	}
}

// The script is the fence for callers outside Go too, so it validates its
// own input and stores the token exactly as given.
func TestScriptDirectly(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	g := redisfence.New(client, nil)
	src := redisfence.ScriptSource
	tests := []struct {
		name    string
		token   string
		want    []any
		wantErr string
		fence   string // stored fence afterwards
	}{
		{"a first token is admitted and stored verbatim", "9007199254740990", []any{int64(1), "9007199254740990"}, "", "9007199254740990"},
		{"2^53-1 is admitted", "9007199254740991", []any{int64(1), "9007199254740991"}, "", "9007199254740991"},
		{"one less is stale", "9007199254740990", []any{int64(0), "9007199254740991"}, "", "9007199254740991"},
		{"2^53 is invalid", "9007199254740992", nil, "fencing: invalid token", "9007199254740991"},
		{"leading zeros are invalid", "07", nil, "fencing: invalid token", "9007199254740991"},
		{"a sign is invalid", "-1", nil, "fencing: invalid token", "9007199254740991"},
		{"an exponent is invalid", "1e3", nil, "fencing: invalid token", "9007199254740991"},
		{"zero is invalid", "0", nil, "fencing: invalid token", "9007199254740991"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Eval(ctx, src, []string{g.FenceKey("direct")}, tt.token).Slice()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want error %q", got, err, tt.wantErr)
				}
			} else if err != nil || len(got) != 2 || got[0] != tt.want[0] || got[1] != tt.want[1] {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
			fence, err := client.Get(ctx, g.FenceKey("direct")).Result()
			if err != nil || fence != tt.fence {
				t.Fatalf("fence = %q, %v; want %q", fence, err, tt.fence)
			}
		})
	}
}

func TestCorruptFenceIsAnErrorNotAnAdmission(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	g := redisfence.New(client, nil)
	if err := client.Set(ctx, g.FenceKey("r"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := g.Put(ctx, "r", "r", 5, []byte("v"))
	if err == nil || errors.Is(err, fencing.ErrStaleToken) || !strings.Contains(err.Error(), "corrupt fence") {
		t.Fatalf("Put over a corrupt fence: got %v, want a corrupt fence error", err)
	}
	if _, err := g.Get(ctx, "r"); !errors.Is(err, fencing.ErrNotFound) {
		t.Fatalf("Get after the refused Put: got %v, want ErrNotFound", err)
	}
}
