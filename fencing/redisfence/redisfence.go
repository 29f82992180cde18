// Package redisfence is a fencing.Guard and fenced key-value store kept in
// Redis (go-redis v9).
//
// Every check runs in one Lua script (fence.lua) that compares the token with
// the resource's fence, raises the fence and, for Put, writes the value, all
// in one atomic step on the server.
//
// # Keys
//
// A resource's fence is the string key "<prefix>{<resource>}:token"; a value
// is the hash "<prefix>{<key>}:value" with fields value, token and resource.
// The braces are a Redis Cluster hash tag. A Put whose resource and key are
// equal touches a single hash slot and works on Redis Cluster; a Put that
// fences a key under a different resource touches two slots, which a single
// Redis server accepts but Redis Cluster refuses (CROSSSLOT).
//
// # Durability
//
// The fence is the guard's memory. If it is lost (a restart without
// persistence, FLUSHALL, eviction, failover to a replica that had not
// received it) the resource accepts stale tokens again. Run the server with
// appendonly yes (appendfsync always if a lost second matters) and
// maxmemory-policy noeviction, and never put a TTL on fence keys.
package redisfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/fencing"
)

//go:embed fence.lua
var fenceLua string

var fenceScript = redis.NewScript(fenceLua)

// DefaultPrefix starts every key that a Guard uses unless Options.Prefix says
// otherwise.
const DefaultPrefix = "fencing:"

// Options tune a Guard. A nil *Options means the defaults.
type Options struct {
	// Prefix starts every key. Empty means DefaultPrefix.
	Prefix string
}

// Guard is a fencing.Guard and fenced key-value store in Redis. It is safe
// for concurrent use as far as its client is.
type Guard struct {
	client redis.Cmdable
	prefix string
}

var _ fencing.Guard = (*Guard)(nil)

// New returns a Guard that keeps its fences and values in client, which may
// be a *redis.Client, *redis.ClusterClient (see the package doc about hash
// slots) or *redis.Ring, but not a pipeline: every call needs its reply.
func New(client redis.Cmdable, opts *Options) *Guard {
	g := &Guard{client: client, prefix: DefaultPrefix}
	if opts != nil && opts.Prefix != "" {
		g.prefix = opts.Prefix
	}
	return g
}

// FenceKey returns the Redis key that holds the highest admitted token of
// resource.
func (g *Guard) FenceKey(resource string) string { return g.prefix + "{" + resource + "}:token" }

// ValueKey returns the Redis key of the hash that holds the value of key.
func (g *Guard) ValueKey(key string) string { return g.prefix + "{" + key + "}:value" }

// Admit implements fencing.Guard with one script call. Errors:
// fencing.ErrInvalidResource, fencing.ErrInvalidToken (nothing sent), a
// *fencing.StaleTokenError, or a wrapped Redis or context error, after which
// it is unknown whether the token was recorded.
func (g *Guard) Admit(ctx context.Context, resource string, token uint64) error {
	if err := fencing.CheckResource(resource); err != nil {
		return err
	}
	if err := fencing.CheckToken(token); err != nil {
		return err
	}
	return g.run(ctx, resource, token, []string{g.FenceKey(resource)})
}

// Put admits token for resource and, in the same script call, stores value
// under key with token and resource; a refused write changes nothing.
// Errors: fencing.ErrInvalidResource, fencing.ErrInvalidKey,
// fencing.ErrInvalidToken (nothing sent), a *fencing.StaleTokenError, or a
// wrapped Redis or context error, after which it is unknown whether the
// write happened.
func (g *Guard) Put(ctx context.Context, resource, key string, token uint64, value []byte) error {
	if err := fencing.CheckWrite(resource, key, token); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	return g.run(ctx, resource, token, []string{g.FenceKey(resource), g.ValueKey(key)}, value, resource)
}

func (g *Guard) run(ctx context.Context, resource string, token uint64, keys []string, extra ...any) error {
	args := append([]any{strconv.FormatUint(token, 10)}, extra...)
	reply, err := fenceScript.Run(ctx, g.client, keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("redisfence: fence script for resource %q: %w", resource, err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("redisfence: fence script for resource %q: unexpected reply %v", resource, reply)
	}
	admitted, ok1 := reply[0].(int64)
	tokStr, ok2 := reply[1].(string)
	if !ok1 || !ok2 {
		return fmt.Errorf("redisfence: fence script for resource %q: unexpected reply %v", resource, reply)
	}
	if admitted == 1 {
		return nil
	}
	highest, err := strconv.ParseUint(tokStr, 10, 64)
	if err != nil {
		return fmt.Errorf("redisfence: fence of resource %q holds %q: %w", resource, tokStr, err)
	}
	return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
}

// Get returns the record last written under key by Put. Errors:
// fencing.ErrInvalidKey, fencing.ErrNotFound, or a wrapped Redis or context
// error.
func (g *Guard) Get(ctx context.Context, key string) (fencing.Record, error) {
	if err := fencing.CheckKey(key); err != nil {
		return fencing.Record{}, err
	}
	vals, err := g.client.HMGet(ctx, g.ValueKey(key), "value", "token", "resource").Result()
	if err != nil {
		return fencing.Record{}, fmt.Errorf("redisfence: get %q: %w", key, err)
	}
	if len(vals) != 3 || vals[0] == nil {
		return fencing.Record{}, fencing.ErrNotFound
	}
	value, _ := vals[0].(string)
	tokStr, _ := vals[1].(string)
	resource, _ := vals[2].(string)
	token, err := strconv.ParseUint(tokStr, 10, 64)
	if err != nil {
		return fencing.Record{}, fmt.Errorf("redisfence: value of %q has token %q: %w", key, tokStr, err)
	}
	return fencing.Record{Key: key, Resource: resource, Token: token, Value: []byte(value)}, nil
}

// Highest returns the highest token admitted for resource, or 0 if none has
// been. Errors: fencing.ErrInvalidResource, or a wrapped Redis or context
// error.
func (g *Guard) Highest(ctx context.Context, resource string) (uint64, error) {
	if err := fencing.CheckResource(resource); err != nil {
		return 0, err
	}
	s, err := g.client.Get(ctx, g.FenceKey(resource)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisfence: highest of %q: %w", resource, err)
	}
	token, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redisfence: fence of resource %q holds %q: %w", resource, s, err)
	}
	return token, nil
}
