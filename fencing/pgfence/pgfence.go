// Package pgfence is a fencing.Guard and fenced key-value store kept in
// PostgreSQL (pgx v5).
//
// Each check is one conditional upsert on the resource's fence row:
//
//	INSERT INTO fencing_tokens AS f (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
//	WHERE f.token <= EXCLUDED.token
//	RETURNING f.token
//
// A row back means admitted, no row means stale. Put runs that upsert and the
// write of the value as one statement (a data-modifying WITH), so they commit
// or fail together.
//
// # Inside the caller's transaction
//
// A Guard runs its statements on whatever DB it was built with: a pool, a
// connection or a pgx.Tx. Built on a transaction, Admit is the fence for
// everything else that transaction writes: the upsert takes the fence row's
// lock and holds it until the transaction ends, so a concurrent writer of the
// same resource waits at its own Admit, and then sees the committed token.
// Check and writes therefore commit atomically, and writers of one resource
// are serialized in token order. Keep such transactions short, since they
// queue every other writer of the resource.
//
// In REPEATABLE READ or SERIALIZABLE transactions, a concurrent update of
// the fence row makes the statement fail with a serialization error
// (SQLSTATE 40001) instead of returning stale; retry the transaction as
// usual.
//
// # Schema
//
// Schema holds the tables; CreateSchema creates them. A fence row must never
// be deleted: it is the guard's memory of the highest token.
package pgfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockgate/lockgate/fencing"
)

// Schema creates the two tables a Guard uses, if they do not exist yet.
// fencing_tokens holds one fence per resource; fencing_values holds the
// values written by Put, with the token that wrote each and the resource
// whose fence admitted it. Token columns are bigint, limited to the valid
// token range 1..2^53-1.
const Schema = `
CREATE TABLE IF NOT EXISTS fencing_tokens (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token BETWEEN 1 AND 9007199254740991),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS fencing_values (
    key        text        PRIMARY KEY,
    resource   text        NOT NULL,
    token      bigint      NOT NULL CHECK (token BETWEEN 1 AND 9007199254740991),
    value      bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
`

const admitSQL = `
INSERT INTO fencing_tokens AS f (resource, token) VALUES ($1::text, $2::bigint)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
WHERE f.token <= EXCLUDED.token
RETURNING f.token`

// putSQL admits the token and writes the value in one statement. The data
// insert selects from the fence CTE, so it writes exactly when the fence
// upsert returned a row.
const putSQL = `
WITH fence AS (
    INSERT INTO fencing_tokens AS f (resource, token) VALUES ($1::text, $2::bigint)
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
    WHERE f.token <= EXCLUDED.token
    RETURNING f.token
)
INSERT INTO fencing_values AS v (key, resource, token, value)
SELECT $3::text, $1::text, fence.token, $4::bytea FROM fence
ON CONFLICT (key) DO UPDATE
    SET resource = EXCLUDED.resource, token = EXCLUDED.token, value = EXCLUDED.value, updated_at = now()
RETURNING v.token`

const highestSQL = `SELECT token FROM fencing_tokens WHERE resource = $1`

const getSQL = `SELECT resource, token, value FROM fencing_values WHERE key = $1`

// DB is the part of pgx that a Guard uses. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateSchema runs Schema on db. It is idempotent, but two CreateSchema
// calls racing on an empty database can fail on PostgreSQL's catalog; run it
// from one place (a migration or the service's start-up).
func CreateSchema(ctx context.Context, db DB) error {
	if _, err := db.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("pgfence: create schema: %w", err)
	}
	return nil
}

// Guard is a fencing.Guard and fenced key-value store in PostgreSQL. It is
// as safe for concurrent use as its DB: a pool is, a connection or
// transaction is not. A Guard is two words; build one per transaction.
type Guard struct {
	db DB
}

var _ fencing.Guard = (*Guard)(nil)

// New returns a Guard that runs its statements on db. The tables of Schema
// must exist.
func New(db DB) *Guard { return &Guard{db: db} }

// Admit implements fencing.Guard with one statement; on a pgx.Tx it also
// holds the fence row's lock until the transaction ends (see the package
// doc). Errors: fencing.ErrInvalidResource, fencing.ErrInvalidToken
// (nothing sent), a *fencing.StaleTokenError, or a wrapped database or
// context error.
func (g *Guard) Admit(ctx context.Context, resource string, token uint64) error {
	if err := fencing.CheckResource(resource); err != nil {
		return err
	}
	if err := fencing.CheckToken(token); err != nil {
		return err
	}
	var got int64
	err := g.db.QueryRow(ctx, admitSQL, resource, int64(token)).Scan(&got)
	return g.result(ctx, resource, token, err)
}

// Put admits token for resource and writes value under key in one
// statement; a refused write changes nothing. Errors:
// fencing.ErrInvalidResource, fencing.ErrInvalidKey, fencing.ErrInvalidToken
// (nothing sent), a *fencing.StaleTokenError, or a wrapped database or
// context error.
func (g *Guard) Put(ctx context.Context, resource, key string, token uint64, value []byte) error {
	if err := fencing.CheckWrite(resource, key, token); err != nil {
		return err
	}
	if value == nil {
		value = []byte{} // pgx sends a nil slice as NULL
	}
	var got int64
	err := g.db.QueryRow(ctx, putSQL, resource, int64(token), key, value).Scan(&got)
	return g.result(ctx, resource, token, err)
}

// result turns the outcome of a fence statement into Admit's and Put's
// errors. No row means the WHERE clause refused the token; a second
// statement then reads the fence to report the highest token. Under READ
// COMMITTED it sees the latest committed fence, which is at least the one
// that refused the token.
func (g *Guard) result(ctx context.Context, resource string, token uint64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		highest, herr := g.Highest(ctx, resource)
		if herr != nil {
			return fmt.Errorf("pgfence: token %d for %q is stale, reading the fence failed: %w", token, resource, herr)
		}
		if highest <= token {
			// Only a fence row deleted or lowered by hand gets here.
			return fmt.Errorf("pgfence: token %d for %q was refused, but the fence now reads %d", token, resource, highest)
		}
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
	default:
		return fmt.Errorf("pgfence: fence %q: %w", resource, err)
	}
}

// Get returns the record last written under key by Put. Errors:
// fencing.ErrInvalidKey, fencing.ErrNotFound, or a wrapped database or
// context error.
func (g *Guard) Get(ctx context.Context, key string) (fencing.Record, error) {
	if err := fencing.CheckKey(key); err != nil {
		return fencing.Record{}, err
	}
	rec := fencing.Record{Key: key}
	var token int64
	err := g.db.QueryRow(ctx, getSQL, key).Scan(&rec.Resource, &token, &rec.Value)
	if errors.Is(err, pgx.ErrNoRows) {
		return fencing.Record{}, fencing.ErrNotFound
	}
	if err != nil {
		return fencing.Record{}, fmt.Errorf("pgfence: get %q: %w", key, err)
	}
	rec.Token = uint64(token)
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	return rec, nil
}

// Highest returns the highest token admitted for resource, or 0 if none has
// been. Errors: fencing.ErrInvalidResource, or a wrapped database or context
// error.
func (g *Guard) Highest(ctx context.Context, resource string) (uint64, error) {
	if err := fencing.CheckResource(resource); err != nil {
		return 0, err
	}
	var token int64
	err := g.db.QueryRow(ctx, highestSQL, resource).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgfence: highest of %q: %w", resource, err)
	}
	return uint64(token), nil
}
