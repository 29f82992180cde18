package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
)

// wireOps adds to opts what access control and operations need: the token
// file's middleware, force release, listing scope and audit names; and it
// re-reads the token file on SIGHUP until ctx ends or the returned stop is
// called. A file that does not parse is logged with its reason (a line
// number, never a token) and the tokens in force stay; each request is
// judged by the tokens in force when it arrived.
func wireOps(ctx context.Context, cfg *config, log zerolog.Logger, opts *handlers.Options) (stop func()) {
	opts.RateLimit, opts.RateBurst = cfg.rateLimit, cfg.rateBurst
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var onHangup []func()
	if cfg.tokens != nil {
		f := cfg.tokens
		opts.Middleware = append(opts.Middleware, f.Middleware)
		opts.AllowForce, opts.Grants, opts.Caller = true, f.Grants, f.Name
		onHangup = append(onHangup, func() {
			warnReadableAuthFile(log, f.Path())
			p, err := f.Reload()
			if err != nil {
				log.Error().Str("auth_file", f.Path()).Str("reason", err.Error()).
					Msg("auth file not reloaded: the tokens in force stay")
				return
			}
			log.Info().Str("auth_file", f.Path()).Int("tokens", p.Len()).Msg("auth file reloaded")
			warnOpenPrefixes(log, f.Path(), p)
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

// warnReadableAuthFile warns when users other than the auth file's owner
// may read it (group or other read permission): its tokens are secrets.
// It is called each time the file is read, at start-up and at every
// reload, so a file loosened while the gateway runs is noticed too.
func warnReadableAuthFile(log zerolog.Logger, path string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn().Str("auth_file", path).Str("mode", fi.Mode().Perm().String()).
		Msg("the auth file is readable by users other than its owner; chmod 600 it")
}

// warnOpenPrefixes warns about the auth file's prefixes that do not end
// with a separator: each grants every name that starts with it ("x" also
// covers xylophone), which is rarely what was meant.
func warnOpenPrefixes(log zerolog.Logger, path string, p *auth.Policy) {
	if open := p.OpenPrefixes(); len(open) > 0 {
		log.Warn().Str("auth_file", path).Strs("prefixes", open).
			Msg("auth file prefixes without a trailing separator (- : . _) grant every name that starts with them " +
				"(x also covers xylophone); end each with a separator, as in x-")
	}
}

// redisLogger puts go-redis's own messages (failed dials, pool trouble) into
// the JSON log as warnings, instead of plain text between its lines.
// go-redis is given host:port addresses only, never the URLs' passwords.
type redisLogger struct{ log zerolog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Msg(fmt.Sprintf(format, v...))
}

func init() {
	settings = append(settings,
		setting{"rate-limit", "LOCKGATE_RATE_LIMIT", "0", "requests per second each caller (token name, client certificate, else IP address) may make on /locks; beyond: 429 with Retry-After; 0: no limit", func(c *config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1e6 {
				return fmt.Errorf("must be a number of requests per second from 0 (no limit) to 1000000")
			}
			c.rateLimit = f
			return nil
		}},
		setting{"rate-burst", "LOCKGATE_RATE_BURST", "10", "requests a caller may make at once above -rate-limit", func(c *config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1e6 {
				return fmt.Errorf("must be a whole number from 1 to 1000000")
			}
			c.rateBurst = n
			return nil
		}},
	)
}
