package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/fencingtest"
	"github.com/lockgate/lockgate/fencing/pgfence"
	"github.com/lockgate/lockgate/internal/pgtest"
)

// The Guard runs on a pool, a single connection or a transaction.
var (
	_ pgfence.DB = (*pgxpool.Pool)(nil)
	_ pgfence.DB = (*pgx.Conn)(nil)
	_ pgfence.DB = pgx.Tx(nil)
)

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	if err := pgfence.CreateSchema(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestPostgresConforms(t *testing.T) {
	fencingtest.Run(t, pgfence.New(newPool(t)))
}

func TestCreateSchemaIsIdempotent(t *testing.T) {
	pool := newPool(t)
	if err := pgfence.CreateSchema(context.Background(), pool); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
}

func TestStaleInsideATransactionLeavesItUsable(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	if err := pgfence.New(pool).Admit(ctx, "r", 7); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	g := pgfence.New(tx)
	var se *fencing.StaleTokenError
	if err := g.Put(ctx, "r", "k", 5, []byte("x")); !errors.As(err, &se) || se.Highest != 7 {
		t.Fatalf("Put(5) after 7: got %v, want stale with highest 7", err)
	}
	if err := g.Put(ctx, "r", "k", 8, []byte("y")); err != nil {
		t.Fatalf("Put(8) in the same transaction after a stale refusal: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := pgfence.New(pool).Get(ctx, "k")
	if err != nil || rec.Token != 8 || string(rec.Value) != "y" {
		t.Fatalf("Get after commit = %+v, %v; want token 8 value y", rec, err)
	}
}

func TestRolledBackAdmissionLeavesNoTrace(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgfence.New(tx).Admit(ctx, "r", 9); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.New(pool).Admit(ctx, "r", 3); err != nil {
		t.Fatalf("Admit(3) after a rolled-back Admit(9): %v", err)
	}
}

// TestAdmitInTransactionsSerializesWriters runs the pattern the package doc
// recommends: Admit, then the caller's own write, in one transaction. Each
// admitted transaction appends to a ledger with a bigserial id. Admit holds
// the fence row's lock until commit, so for one resource the ledger ids are
// handed out in commit order, and the tokens must never go down along them.
// Without that lock (say, a SELECT then UPDATE) transactions would overlap
// and the order would break.
func TestAdmitInTransactionsSerializesWriters(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (
		id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, writer int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	resources := []string{"acct:1", "acct:2"}
	const writers, ops = 16, 40
	grants := map[string]*atomic.Uint64{"acct:1": {}, "acct:2": {}}

	type outcome struct {
		resource string
		token    uint64
		err      error
	}
	results := make(chan []outcome, writers)
	var wg sync.WaitGroup
	for id := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(42, uint64(id)))
			var outs []outcome
			for range ops {
				res := resources[rng.IntN(len(resources))]
				tok := grants[res].Add(1)
				if rng.IntN(3) == 0 { // an old grant
					tok = 1 + rng.Uint64N(tok)
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := pgfence.New(tx).Admit(ctx, res, tok); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO ledger (resource, token, writer) VALUES ($1, $2, $3)`,
						res, int64(tok), id)
					return err
				})
				outs = append(outs, outcome{res, tok, err})
			}
			results <- outs
		})
	}
	wg.Wait()
	close(results)

	admitted := map[string]int{}
	refused := map[string]int{}
	maxAdmitted := map[string]uint64{}
	var refusals []outcome
	for outs := range results {
		for _, o := range outs {
			var se *fencing.StaleTokenError
			switch {
			case o.err == nil:
				admitted[o.resource]++
				maxAdmitted[o.resource] = max(maxAdmitted[o.resource], o.token)
			case errors.As(o.err, &se):
				refused[o.resource]++
				refusals = append(refusals, o)
				if se.Highest <= o.token {
					t.Errorf("refusal of %d on %s names highest %d", o.token, o.resource, se.Highest)
				}
			default:
				t.Errorf("unexpected error for token %d on %s: %v", o.token, o.resource, o.err)
			}
		}
	}
	for _, res := range resources {
		if admitted[res] == 0 || refused[res] == 0 {
			t.Fatalf("%s: %d admitted, %d refused; the test needs both", res, admitted[res], refused[res])
		}
		rows, err := pool.Query(ctx, `SELECT id, token FROM ledger WHERE resource = $1 ORDER BY id`, res)
		if err != nil {
			t.Fatal(err)
		}
		type entry struct{ ID, Token int64 }
		entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != admitted[res] {
			t.Errorf("%s: ledger has %d rows, %d transactions were admitted", res, len(entries), admitted[res])
		}
		for i := 1; i < len(entries); i++ {
			if entries[i].Token < entries[i-1].Token {
				t.Errorf("%s: ledger id %d has token %d after id %d with token %d",
					res, entries[i].ID, entries[i].Token, entries[i-1].ID, entries[i-1].Token)
			}
		}
		highest, err := pgfence.New(pool).Highest(ctx, res)
		if err != nil || highest != maxAdmitted[res] {
			t.Errorf("%s: Highest = %d, %v; want the highest admitted token %d", res, highest, err, maxAdmitted[res])
		}
	}
	// A refused token is below the highest token in the ledger: it was
	// refused in favor of something that really committed.
	for _, o := range refusals {
		if o.token >= maxAdmitted[o.resource] {
			t.Errorf("token %d on %s was refused, but no higher token ever committed", o.token, o.resource)
		}
	}
	t.Logf("%s", fmt.Sprint("admitted ", admitted, ", refused ", refused))
}
