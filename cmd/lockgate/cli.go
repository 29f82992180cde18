package main

// The client subcommands of the lockgate binary: run (a distributed
// flock(1)), and acquire, extend, release and status for scripts. main
// dispatches to them when the first argument names one; without one the
// binary is the gateway.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lockgate/lockgate/client"
)

// Exit statuses of the client subcommands. A command run by `lockgate run`
// may itself exit with any of these; the one-line message on stderr says
// which it was.
const (
	exitOK = 0
	// exitFailed: the gateway refused the request or could not be reached
	// (acquire, extend, release, status).
	exitFailed = 1
	// exitNotHeld: status found nothing holding the lock.
	exitNotHeld = 3
	// exitUsage: bad flags or arguments (EX_USAGE).
	exitUsage = 64
	// exitUnavailable: run could not take the lock because the gateway was
	// unreachable, had no quorum or refused the request (EX_UNAVAILABLE).
	exitUnavailable = 69
	// exitLost: run's lock was lost while the command ran; the command was
	// sent SIGTERM, and SIGKILL after --kill-after (EX_SOFTWARE).
	exitLost = 70
	// exitTaken: another lease holds the lock and --wait ran out
	// (EX_TEMPFAIL): run and acquire.
	exitTaken = 75
	// exitDenied: the bearer token is missing, unknown or may not do this
	// (401/403) (EX_NOPERM).
	exitDenied = 77
	// exitCannotExec and exitNotFound: run could not start the command, as
	// a shell reports it.
	exitCannotExec = 126
	exitNotFound   = 127
)

// defaultGateway is the gateway of the client subcommands without --gateway
// or LOCKGATE_URL.
const defaultGateway = "http://127.0.0.1:8080"

// subcommand runs the client subcommand name with args and returns the
// exit status. Messages go to stderr as one line starting "lockgate NAME:".
func subcommand(name string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	switch name {
	case "run":
		return runCommand(args, getenv, stdout, stderr)
	case "acquire":
		return acquireCommand(args, getenv, stdout, stderr)
	case "extend":
		return extendCommand(args, getenv, stdout, stderr)
	case "release":
		return releaseCommand(args, getenv, stdout, stderr)
	case "status":
		return statusCommand(args, getenv, stdout, stderr)
	}
	fmt.Fprintf(stderr, "lockgate: unknown subcommand %q: the subcommands are run, acquire, extend, release and status; "+
		"without one, lockgate runs the gateway, whose settings are flags (lockgate -h)\n", name)
	return exitUsage
}

// common holds the flags every client subcommand has.
type common struct {
	name      string // the subcommand
	gateway   string
	tokenFile string
	cacert    string
	cert, key string
	timeout   time.Duration
	lock      string
	stderr    io.Writer
}

func newFlags(name string, getenv func(string) string, stderr io.Writer, usage string) (*flag.FlagSet, *common) {
	c := &common{name: name, stderr: stderr}
	fs := flag.NewFlagSet("lockgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	gw := getenv("LOCKGATE_URL")
	if gw == "" {
		gw = defaultGateway
	}
	fs.StringVar(&c.gateway, "gateway", gw, "gateway URL (env LOCKGATE_URL)")
	fs.StringVar(&c.tokenFile, "token-file", getenv("LOCKGATE_TOKEN_FILE"),
		"file holding the bearer token, when the gateway has access control (env LOCKGATE_TOKEN_FILE)")
	fs.StringVar(&c.cacert, "cacert", getenv("LOCKGATE_CACERT"),
		"PEM file of the CAs trusted to sign an https:// gateway's certificate, instead of the system's (env LOCKGATE_CACERT)")
	fs.StringVar(&c.cert, "cert", getenv("LOCKGATE_CERT"),
		"PEM client certificate for a gateway that requires one (mutual TLS); needs --key (env LOCKGATE_CERT)")
	fs.StringVar(&c.key, "key", getenv("LOCKGATE_KEY"), "PEM private key of --cert (env LOCKGATE_KEY)")
	fs.StringVar(&c.lock, "lock", "", "the lock's resource name")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: lockgate %s %s\n", name, usage)
		fs.PrintDefaults()
	}
	return fs, c
}

// parse parses args, allowing flags after the NAME argument too, and
// returns the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil // everything after -- is positional
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// resource returns the lock name from NAME, --lock or LOCKGATE_RESOURCE.
func (c *common) resource(pos []string, getenv func(string) string) (string, error) {
	switch {
	case len(pos) > 1:
		return "", fmt.Errorf("one lock name expected, got %d arguments", len(pos))
	case len(pos) == 1 && c.lock != "" && pos[0] != c.lock:
		return "", fmt.Errorf("two lock names: %q and --lock %q", pos[0], c.lock)
	case len(pos) == 1:
		return pos[0], nil
	case c.lock != "":
		return c.lock, nil
	case getenv("LOCKGATE_RESOURCE") != "":
		return getenv("LOCKGATE_RESOURCE"), nil
	}
	return "", errors.New("no lock name: give NAME, --lock or LOCKGATE_RESOURCE")
}

func (c *common) client() (*client.Client, error) {
	opts := client.Options{CAFile: c.cacert, CertFile: c.cert, KeyFile: c.key}
	if (c.cert == "") != (c.key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if c.tokenFile != "" {
		tok, err := readSecret("--token-file", c.tokenFile)
		if err != nil {
			return nil, err
		}
		opts.BearerToken = tok
	}
	return client.New(c.gateway, &opts)
}

// readSecret returns the content of the file a flag names, without the
// white space around it; an empty file is an error. The error names the flag
// and the file, never the content.
func readSecret(flag, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s %s is empty", flag, file)
	}
	return v, nil
}

// failf prints the one-line reason and returns code.
func (c *common) failf(code int, format string, a ...any) int {
	msg := fmt.Sprintf(format, a...)
	msg = strings.ReplaceAll(msg, "\n", " ")
	fmt.Fprintf(c.stderr, "lockgate %s: %s\n", c.name, msg)
	return code
}

// usagef reports a usage error.
func (c *common) usagef(format string, a ...any) int {
	return c.failf(exitUsage, format+" (-h for help)", a...)
}

// exitFor maps a gateway error to an exit status for the scripting
// subcommands.
func exitFor(err error) int {
	switch {
	case errors.Is(err, client.ErrTaken):
		return exitTaken
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		return exitDenied
	}
	return exitFailed
}

// withTimeout bounds one scripting call.
func (c *common) withTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

func acquireCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs, c := newFlags("acquire", getenv, stderr, "[flags] [NAME]\n\n"+
		"Takes the lock NAME (default LOCKGATE_RESOURCE) and prints the lease as JSON, or with --env\n"+
		"as shell assignments\n"+
		"(eval \"$(lockgate acquire --env NAME)\"). Exit 0, 75 if another lease holds it.")
	ttl := fs.Duration("ttl", 30*time.Second, "lock TTL")
	wait := fs.Duration("wait", 0, "how long to wait for a held lock")
	owner := fs.String("owner", acquireOwner(), "label shown by status; default names this machine and the calling shell")
	leaseID := fs.String("lease-id", "", "a lease id of your own (16 to 128 of A-Z a-z 0-9 - _; a secret: other users see command lines, prefer --lease-id-file); default: a fresh random one")
	leaseIDFile := fs.String("lease-id-file", "", "file holding the lease id of your own")
	env := fs.Bool("env", false, "print LOCKGATE_RESOURCE, LOCKGATE_LEASE_ID, LOCKGATE_FENCING_TOKEN as shell assignments")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the whole call, beyond --wait")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	name, err := c.resource(pos, getenv)
	if err != nil {
		return c.usagef("%v", err)
	}
	if *leaseIDFile != "" {
		if *leaseID != "" {
			return c.usagef("--lease-id and --lease-id-file: give one")
		}
		if *leaseID, err = readSecret("--lease-id-file", *leaseIDFile); err != nil {
			return c.usagef("%v", err)
		}
	}
	cl, err := c.client()
	if err != nil {
		return c.usagef("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait+c.timeout)
	defer cancel()
	o := &client.AcquireOptions{TTL: *ttl, Wait: *wait, Owner: *owner, LeaseID: *leaseID}
	if o.LeaseID == "" {
		o.LeaseID = client.NewLeaseID()
	}
	var lease *client.Lease
	for attempt := 1; ; attempt++ {
		// A transient failure may have lost a grant's answer: retrying with
		// the same lease id gets that grant back rather than a second one.
		lease, err = cl.Acquire(ctx, name, o)
		if err == nil || !client.Transient(err) || attempt == 3 {
			break
		}
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	if err != nil {
		return c.failf(exitFor(err), "%s: %v", name, err)
	}
	if *env {
		fmt.Fprintf(stdout, "LOCKGATE_RESOURCE=%s\nLOCKGATE_LEASE_ID=%s\nLOCKGATE_FENCING_TOKEN=%d\n"+
			"export LOCKGATE_RESOURCE LOCKGATE_LEASE_ID LOCKGATE_FENCING_TOKEN\n",
			shellQuote(lease.Resource), shellQuote(lease.LeaseID), lease.FencingToken)
		return exitOK
	}
	return printJSON(c, stdout, lease.Lease)
}

func extendCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs, c := newFlags("extend", getenv, stderr, "[flags] [NAME]\n\n"+
		"Extends a lock this lease holds and prints the lease as JSON, without the lease id. NAME,\n"+
		"the lease id and the token default to LOCKGATE_RESOURCE, LOCKGATE_LEASE_ID and\n"+
		"LOCKGATE_FENCING_TOKEN.")
	ttl := fs.Duration("ttl", 0, "new TTL; default the TTL the lock was taken with")
	src, token := leaseFlags(fs, getenv)
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the call")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	name, leaseID, cl, code := c.prepare(pos, getenv, src)
	if code != exitOK {
		return code
	}
	ctx, cancel := c.withTimeout()
	defer cancel()
	lease, err := cl.Extend(ctx, name, leaseID, &client.ExtendOptions{TTL: *ttl, IfToken: *token})
	if err != nil {
		return c.failf(exitFor(err), "%s: %v", name, err)
	}
	return printJSON(c, stdout, extended{Resource: lease.Resource, FencingToken: lease.FencingToken,
		TTLms: lease.TTLms, ValidityMs: lease.ValidityMs, ExpiresAt: lease.ExpiresAt})
}

// extended is what extend prints: the lease without its id. The caller
// has the id already, and a secret on stdout ends up in logs and
// terminals' scrollback.
type extended struct {
	Resource     string    `json:"resource"`
	FencingToken int64     `json:"fencing_token"`
	TTLms        int64     `json:"ttl_ms"`
	ValidityMs   int64     `json:"validity_ms"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// acquireOwner is acquire's default owner: this machine and the process
// that ran acquire (the script that holds the lock), as status shows it.
func acquireOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("lockgate-acquire@%s:%d", host, os.Getppid())
}

func releaseCommand(args []string, getenv func(string) string, _, stderr io.Writer) int {
	fs, c := newFlags("release", getenv, stderr, "[flags] [NAME]\n\n"+
		"Releases a lock this lease holds. NAME, the lease id and the token default to\n"+
		"LOCKGATE_RESOURCE, LOCKGATE_LEASE_ID and LOCKGATE_FENCING_TOKEN.")
	src, token := leaseFlags(fs, getenv)
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the call")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	name, leaseID, cl, code := c.prepare(pos, getenv, src)
	if code != exitOK {
		return code
	}
	ctx, cancel := c.withTimeout()
	defer cancel()
	if err := cl.Release(ctx, name, leaseID, *token); err != nil {
		return c.failf(exitFor(err), "%s: %v", name, err)
	}
	return exitOK
}

func statusCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs, c := newFlags("status", getenv, stderr, "[flags] [NAME]\n\n"+
		"Prints who holds the lock NAME (default LOCKGATE_RESOURCE) as JSON (never the lease id).\n"+
		"Exit 0 if held, 3 if not.")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the call")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	name, err := c.resource(pos, getenv)
	if err != nil {
		return c.usagef("%v", err)
	}
	cl, err := c.client()
	if err != nil {
		return c.usagef("%v", err)
	}
	ctx, cancel := c.withTimeout()
	defer cancel()
	info, err := cl.Get(ctx, name)
	if errors.Is(err, client.ErrNotHeld) {
		return c.failf(exitNotHeld, "%s is not held", name)
	}
	if err != nil {
		return c.failf(exitFor(err), "%s: %v", name, err)
	}
	return printJSON(c, stdout, info)
}

// leaseFlags are the --lease-id, --lease-id-file and --if-token flags of
// extend and release; the lease id is resolved by leaseOf.
func leaseFlags(fs *flag.FlagSet, getenv func(string) string) (*leaseSource, *int64) {
	src := &leaseSource{env: getenv("LOCKGATE_LEASE_ID")}
	fs.StringVar(&src.flag, "lease-id", "", "the lease id; a secret: other users see command lines, prefer --lease-id-file or LOCKGATE_LEASE_ID")
	fs.StringVar(&src.file, "lease-id-file", "", "file holding the lease id")
	var def int64
	if v := getenv("LOCKGATE_FENCING_TOKEN"); v != "" {
		_, _ = fmt.Sscan(v, &def)
	}
	token := fs.Int64("if-token", def, "refuse unless the holder's fencing token is this (env LOCKGATE_FENCING_TOKEN); 0: no check")
	return src, token
}

// leaseSource is where extend and release find the lease id: --lease-id,
// --lease-id-file, else LOCKGATE_LEASE_ID.
type leaseSource struct{ flag, file, env string }

// id returns the lease id: the flag or the file (giving both is an error),
// else the environment; "" if none.
func (s *leaseSource) id() (string, error) {
	switch {
	case s.flag != "" && s.file != "":
		return "", errors.New("--lease-id and --lease-id-file: give one")
	case s.flag != "":
		return s.flag, nil
	case s.file != "":
		return readSecret("--lease-id-file", s.file)
	}
	return s.env, nil
}

// prepare finds the lock name and builds the client for extend and release.
func (c *common) prepare(pos []string, getenv func(string) string, src *leaseSource) (string, string, *client.Client, int) {
	name, err := c.resource(pos, getenv)
	if err != nil {
		return "", "", nil, c.usagef("%v", err)
	}
	leaseID, err := src.id()
	if err != nil {
		return "", "", nil, c.usagef("%v", err)
	}
	if leaseID == "" {
		return "", "", nil, c.usagef("no lease id: give --lease-id-file, LOCKGATE_LEASE_ID or --lease-id")
	}
	cl, err := c.client()
	if err != nil {
		return "", "", nil, c.usagef("%v", err)
	}
	return name, leaseID, cl, exitOK
}

func printJSON(c *common, stdout io.Writer, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return c.failf(exitFailed, "%v", err)
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return exitOK
}

// flagExit is the status for a flag parse error (already printed): 0 for
// -h, else a usage error.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
