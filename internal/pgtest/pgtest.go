// Package pgtest gives each integration test its own PostgreSQL database.
//
// Tests reach the server named by the LOCKGATE_TEST_PG environment variable
// (a postgres:// URL or key=value DSN of a role allowed to create
// databases), by default postgres://postgres@127.0.0.1:5432/postgres. Each
// call to NewDatabase creates a database with a unique name and drops it in
// t.Cleanup, so tests can run in parallel and leave nothing behind.
//
// Under `go test -short` every helper skips the test. Otherwise an
// unreachable server fails the test with a message that says what to install
// or start: a skipped integration test looks like a passing one.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvVar names the environment variable that overrides DefaultDSN.
const EnvVar = "LOCKGATE_TEST_PG"

// DefaultDSN is the server the tests use when EnvVar is unset: a local
// PostgreSQL with trust authentication for the postgres role.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// NamePrefix starts the name of every database NewDatabase creates, so
// leftovers of a killed test run are easy to find and drop.
const NamePrefix = "lockgate_test_"

// AdminDSN returns the DSN of the server the tests use (EnvVar or
// DefaultDSN). Under -short it skips t. It fails t if the DSN does not parse
// or the server does not answer within 5 seconds, with advice on installing
// and starting PostgreSQL.
func AdminDSN(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL; skipped under -short")
	}
	dsn, source := os.Getenv(EnvVar), EnvVar
	if dsn == "" {
		dsn, source = DefaultDSN, "the default DSN"
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// The DSN may hold a password: report the parse error, not the DSN.
		t.Fatalf("pgtest: %s does not parse as a PostgreSQL DSN: %v", source, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: PostgreSQL is not reachable at %s:%d as user %q (%v).\n"+
			"Integration tests need PostgreSQL 13 or later that lets this role create databases, e.g.:\n"+
			"  Debian/Ubuntu: apt-get install postgresql && service postgresql start\n"+
			"  macOS: brew install postgresql && brew services start postgresql\n"+
			"Tests expect it at 127.0.0.1:5432 as user postgres with trust auth; "+
			"override with %s=postgres://user:pass@host:port/db.\n"+
			"Run go test -short to skip integration tests.",
			cfg.Host, cfg.Port, cfg.User, err, EnvVar)
	}
	_ = conn.Close(ctx)
	return dsn
}

// NewDatabase creates an empty database with a unique name and returns a
// DSN for it: the admin DSN with the database replaced. The database is
// dropped (WITH (FORCE), so open connections cannot block it) when the test
// ends. It skips or fails t as AdminDSN does, and fails t if the database
// cannot be created. The DSN may hold a password: do not log it.
func NewDatabase(t testing.TB) string {
	t.Helper()
	admin := AdminDSN(t)
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	name := NamePrefix + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { drop(t, admin, name) })
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// withDatabase returns dsn (a URL or key=value DSN) with its database
// replaced by name, keeping every other setting.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("admin DSN does not parse as a URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil // a later keyword overrides an earlier one
}

func drop(t testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("pgtest: drop database %s: connect: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
	}
}

// NewPool creates a database as NewDatabase does and returns a pool
// connected to it. The pool is closed before the database is dropped.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // registered after the drop, so it runs first
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: ping new database: %v", err)
	}
	return pool
}
