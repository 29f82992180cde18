package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/pgfence"
	"github.com/lockgate/lockgate/fencing/redisfence"
)

const (
	envAddr     = "FENCEDKV_ADDR"
	envRedis    = "FENCEDKV_REDIS"
	envPostgres = "FENCEDKV_POSTGRES"
	defaultAddr = "127.0.0.1:8081"
)

// startupTimeout bounds the first contact with Redis or PostgreSQL.
const startupTimeout = 5 * time.Second

type config struct {
	addr        string
	redisURL    string
	postgresDSN string
}

// parseConfig reads flags, falling back to environment variables; a flag
// wins over its variable. Errors name the flag and the variable.
func parseConfig(args []string, getenv func(string) string, usageOut io.Writer) (config, error) {
	cfg := config{addr: getenv(envAddr), redisURL: getenv(envRedis), postgresDSN: getenv(envPostgres)}
	if cfg.addr == "" {
		cfg.addr = defaultAddr
	}
	fs := flag.NewFlagSet("fencedkv", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.StringVar(&cfg.addr, "addr", cfg.addr, "listen address host:port (env "+envAddr+")")
	fs.StringVar(&cfg.redisURL, "redis", cfg.redisURL, "store in Redis at this redis:// URL (env "+envRedis+")")
	fs.StringVar(&cfg.postgresDSN, "postgres", cfg.postgresDSN, "store in PostgreSQL at this DSN (env "+envPostgres+")")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: fencedkv takes only flags", fs.Arg(0))
	}

	_, port, err := net.SplitHostPort(cfg.addr) // an empty host means all interfaces
	if err != nil {
		return config{}, fmt.Errorf("-addr (%s) %q: want host:port: %w", envAddr, cfg.addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return config{}, fmt.Errorf("-addr (%s) %q: port %q is not a number in 0..65535", envAddr, cfg.addr, port)
	}
	if cfg.redisURL != "" && cfg.postgresDSN != "" {
		return config{}, fmt.Errorf("-redis (%s) and -postgres (%s) are both set: choose one store", envRedis, envPostgres)
	}
	// Parse early so that a typo fails before anything starts. The URL and
	// DSN may hold passwords, so errors quote neither.
	if cfg.redisURL != "" {
		if _, err := redis.ParseURL(cfg.redisURL); err != nil {
			return config{}, fmt.Errorf("-redis (%s): not a valid redis:// URL: %w", envRedis, withoutURL(err))
		}
	}
	if cfg.postgresDSN != "" {
		if _, err := pgxpool.ParseConfig(cfg.postgresDSN); err != nil {
			return config{}, fmt.Errorf("-postgres (%s): not a valid PostgreSQL DSN: %w", envPostgres, err)
		}
	}
	return cfg, nil
}

// openStore connects to the configured store and checks that it answers.
// The returned function releases it.
func openStore(ctx context.Context, cfg config, log zerolog.Logger) (store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	switch {
	case cfg.redisURL != "":
		opts, err := redis.ParseURL(cfg.redisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis (%s): not a valid redis:// URL: %w", envRedis, withoutURL(err))
		}
		client := redis.NewClient(opts)
		if err := client.Ping(ctx).Err(); err != nil {
			_ = client.Close()
			return nil, nil, fmt.Errorf("-redis (%s): Redis at %s does not answer: %w", envRedis, opts.Addr, err)
		}
		log.Info().Str("store", "redis").Str("redis_addr", opts.Addr).Int("redis_db", opts.DB).Msg("store ready")
		ping := func(ctx context.Context) error { return client.Ping(ctx).Err() }
		return pingStore{redisfence.New(client, nil), ping}, func() { _ = client.Close() }, nil

	case cfg.postgresDSN != "":
		pcfg, err := pgxpool.ParseConfig(cfg.postgresDSN)
		if err != nil {
			return nil, nil, fmt.Errorf("-postgres (%s): not a valid PostgreSQL DSN: %w", envPostgres, err)
		}
		where := fmt.Sprintf("%s:%d/%s", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database)
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err == nil {
			err = pool.Ping(ctx)
			if err != nil {
				pool.Close()
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("-postgres (%s): PostgreSQL at %s does not answer: %w", envPostgres, where, err)
		}
		if err := pgfence.CreateSchema(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("-postgres (%s): %w", envPostgres, err)
		}
		log.Info().Str("store", "postgres").Str("postgres", where).Msg("store ready")
		return pingStore{pgfence.New(pool), pool.Ping}, pool.Close, nil

	default:
		log.Warn().Str("store", "memory").
			Msg("no -redis or -postgres given: using the embedded in-memory store; values and fences are lost when fencedkv stops")
		return fencing.NewMemory(), func() {}, nil
	}
}

// withoutURL drops the URL that a *url.Error quotes: it may hold a password.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// pingStore is a store whose backend /readyz can ping.
type pingStore struct {
	store
	ping func(ctx context.Context) error
}

// Ping asks the store's backend (Redis or PostgreSQL) whether it answers.
func (p pingStore) Ping(ctx context.Context) error { return p.ping(ctx) }
