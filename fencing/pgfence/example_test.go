package pgfence_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/pgfence"
)

// A service that keeps its own tables fences them by running Admit first in
// the same transaction. The fence row stays locked until commit, so the
// check and the UPDATE commit together; a holder with an older token gets
// ErrStaleToken and its transaction changes nothing.
//
// This example needs a PostgreSQL server, so it is compiled but not run.
func ExampleGuard_Admit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgfence.CreateSchema(ctx, pool); err != nil {
		log.Fatal(err)
	}

	token := uint64(42) // from the lock grant for "account:17"
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := pgfence.New(tx).Admit(ctx, "account:17", token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 100 WHERE id = 17`)
		return err
	})
	var stale *fencing.StaleTokenError
	switch {
	case errors.As(err, &stale):
		log.Printf("lock lost: token %d is older than %d; nothing was written", stale.Token, stale.Highest)
	case err != nil:
		log.Fatal(err)
	}
}

// Put checks the token and writes the value in one statement on a pool.
//
// This example needs a PostgreSQL server, so it is compiled but not run.
func ExampleGuard_Put() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	guard := pgfence.New(pool)
	if err := guard.Put(ctx, "reports", "report.txt", 7, []byte("final")); err != nil {
		log.Fatal(err)
	}
	err = guard.Put(ctx, "reports", "report.txt", 5, []byte("late"))
	log.Println(errors.Is(err, fencing.ErrStaleToken)) // true
}
