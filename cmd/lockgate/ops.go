package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/handlers"
)

// wireOps adds to opts what access control and operations need: the token
// file's middleware, force release, listing scope and audit names; and it
// re-reads the token file on SIGHUP until ctx ends or the returned stop is
// called. A file that does not parse is logged with its reason (a line
// number, never a token) and the tokens in force stay; each request is
// judged by the tokens in force when it arrived.
func wireOps(ctx context.Context, cfg *config, log zerolog.Logger, opts *handlers.Options) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var onHangup []func()
	if cfg.tokens != nil {
		f := cfg.tokens
		opts.Middleware = append(opts.Middleware, f.Middleware)
		opts.AllowForce, opts.Scope, opts.Caller = true, f.Scope, f.Name
		onHangup = append(onHangup, func() {
			p, err := f.Reload()
			if err != nil {
				log.Error().Str("auth_file", f.Path()).Str("reason", err.Error()).
					Msg("auth file not reloaded: the tokens in force stay")
				return
			}
			log.Info().Str("auth_file", f.Path()).Int("tokens", p.Len()).Msg("auth file reloaded")
		})
	}
	go func() {
		for {
			select {
			case <-hup:
				log.Info().Msg("SIGHUP: reloading")
				for _, fn := range onHangup {
					fn()
				}
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}
