package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/lockcore"
)

// flagTypes names what each setting takes, for -h (flag shows the
// back-quoted word of a usage as the flag's argument).
var flagTypes = map[string]string{
	"addr": "host:port", "redis": "URLs", "redis-password-file": "file", "node-timeout": "duration", "max-node-timeout": "duration", "drift-factor": "fraction",
	"min-ttl": "duration", "max-ttl": "duration", "default-ttl": "duration", "max-wait": "duration",
	"max-waiters": "count", "max-waiters-per-caller": "count", "max-watchers": "count", "stream-idle": "duration", "watch-poll": "duration", "body-limit": "bytes", "log-level": "level", "auth-file": "file",
	"tls-cert": "file", "tls-key": "file", "tls-client-ca": "file", "rate-limit": "per-second", "rate-burst": "count",
	"read-header-timeout": "duration", "read-body-timeout": "duration", "max-header-bytes": "bytes", "ui": "bool",
	"shutdown-delay": "duration",
}

// printUsage is -h: each flag with the type of its argument (flag's own
// listing calls every one "string"), its usage, its environment variable and
// its default.
func printUsage(w io.Writer) {
	fmt.Fprint(w, subcommandsUsage)
	fmt.Fprintln(w, "\nGateway settings (every flag also has a LOCKGATE_* variable; a flag given wins):")
	for _, s := range settings {
		typ := flagTypes[s.flag]
		if typ == "" {
			typ = "value"
		}
		fmt.Fprintf(w, "  -%s %s\n    \t%s (env %s)", s.flag, typ, s.usage, s.env)
		if s.def != "" {
			fmt.Fprintf(w, " (default %q)", s.def)
		}
		fmt.Fprintln(w)
	}
}

// subcommandsUsage opens -h: what the binary does with and without a
// subcommand.
const subcommandsUsage = `Usage:
  lockgate [flags]                      run the gateway (the settings below)
  lockgate run --lock NAME -- cmd...    run cmd while holding the lock (a distributed flock)
  lockgate acquire [flags] NAME         take a lock, print the lease (JSON, or --env for sh)
  lockgate extend [flags] [NAME]        extend a lock this lease holds
  lockgate release [flags] [NAME]       release a lock this lease holds
  lockgate status [flags] NAME          print who holds a lock
Run "lockgate SUBCOMMAND -h" for a subcommand's flags.
`

// maskURL hides the password of a Redis URL, even one that does not parse:
// everything between the first ':' of the user part and the last '@'
// before the host is replaced.
func maskURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return raw
	}
	out := user + ":xxxxx" + rest[at:]
	if ok {
		out = scheme + "://" + out
	}
	return out
}

// listenError explains why the listener could not open, naming the setting
// the way the address was given (or saying it is the default).
func listenError(cfg *config, err error) error {
	source := "default"
	for _, e := range cfg.effective {
		if e.flag == "addr" {
			source = e.source
		}
	}
	switch source {
	case "flag":
		return fmt.Errorf("bad setting -addr %q: %w", cfg.Addr, err)
	case "env":
		return fmt.Errorf("bad setting LOCKGATE_ADDR=%q: %w", cfg.Addr, err)
	}
	return fmt.Errorf("cannot listen on %s, the default address (choose another with -addr or LOCKGATE_ADDR): %w", cfg.Addr, err)
}

// pingTimeout bounds the start-up PING of each node.
const pingTimeout = 2 * time.Second

// warnSilentNodes PINGs every node once at start-up, in parallel, and warns
// about each that does not answer: the gateway starts anyway (a node may
// come up later, and /readyz follows the quorum), but a mistyped URL shows
// at once.
func warnSilentNodes(ctx context.Context, nodes []lockcore.Node, quorum int, log zerolog.Logger) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	silent := 0
	for _, n := range nodes {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			defer cancel()
			if err := n.Ping(pctx); err != nil {
				mu.Lock()
				silent++
				mu.Unlock()
				log.Warn().Str("node", n.String()).Str("error", err.Error()).Msg("a lock node does not answer PING")
			}
		})
	}
	wg.Wait()
	if answered := len(nodes) - silent; silent > 0 && answered < quorum {
		log.Warn().Int("answered", answered).Int("quorum", quorum).
			Msg("fewer lock nodes answer than a quorum: every lock request fails with 503 until enough do")
	}
}
