// Command fencedkv is a small key-value store over HTTP that refuses writes
// carrying a stale fencing token. It shows how a storage service uses package
// fencing, and gives lockgate's clients something to fence against.
//
// Usage:
//
//	fencedkv [-addr host:port] [-redis URL | -postgres DSN]
//
// Each flag falls back to an environment variable: FENCEDKV_ADDR (default
// 127.0.0.1:8081), FENCEDKV_REDIS, FENCEDKV_POSTGRES. With neither a Redis
// URL nor a PostgreSQL DSN the store lives in memory and is lost on exit.
// With PostgreSQL, fencedkv creates its tables (pgfence.Schema) at start-up.
//
// API (errors are application/problem+json):
//
//	PUT /kv/{key}   body: the value (at most 1 MiB)
//	                Fencing-Token: the writer's token (required)
//	                Fencing-Resource: the locked resource (optional, default: the key)
//	                204 stored, 409 stale token, 400 bad token or key, 413 too large
//	GET /kv/{key}   200, body: the value; headers Fencing-Token and
//	                Fencing-Resource name the write that stored it; 404 if absent
//	GET /healthz    200 while the process is serving
//
// Keys are 1 to 200 characters of A-Z a-z 0-9 . _ : -.
// SIGINT or SIGTERM shut the server down gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// shutdownGrace is how long in-flight requests get to finish after a signal.
const shutdownGrace = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "fencedkv:", err)
		stop()
		os.Exit(1)
	}
}

// run starts fencedkv and serves until ctx is done, then shuts down
// gracefully. Logs go to logOut. onListen, if not nil, is told the address
// the server listens on (tests use -addr 127.0.0.1:0). It returns
// configuration and start-up errors naming the setting at fault.
func run(ctx context.Context, args []string, getenv func(string) string, logOut io.Writer, onListen func(addr string)) error {
	cfg, err := parseConfig(args, getenv, logOut)
	if err != nil {
		return err
	}
	log := zerolog.New(logOut).With().Timestamp().Str("service", "fencedkv").Logger()

	st, closeStore, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("-addr (%s): %w", envAddr, err)
	}
	srv := &http.Server{
		Handler:           newHandler(st, log),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	log.Info().Str("addr", ln.Addr().String()).Msg("listening")
	if onListen != nil {
		onListen(ln.Addr().String())
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info().Msg("stopped")
	return nil
}
