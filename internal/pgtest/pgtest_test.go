package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestWithDatabase(t *testing.T) {
	tests := []struct {
		name, dsn, want string
	}{
		{"a URL keeps user, host and query",
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
			"postgres://postgres@127.0.0.1:5432/lockgate_test_x?sslmode=disable"},
		{"a URL without a database gets one",
			"postgresql://u:p%40ss@db.example:6543",
			"postgresql://u:p%40ss@db.example:6543/lockgate_test_x"},
		{"a keyword DSN gets a later dbname",
			"host=127.0.0.1 user=postgres dbname=postgres",
			"host=127.0.0.1 user=postgres dbname=postgres dbname=lockgate_test_x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := withDatabase(tt.dsn, "lockgate_test_x")
			if err != nil {
				t.Fatalf("withDatabase: %v", err)
			}
			if got != tt.want {
				t.Fatalf("withDatabase = %q, want %q", got, tt.want)
			}
			cfg, err := pgx.ParseConfig(got)
			if err != nil {
				t.Fatalf("result does not parse: %v", err)
			}
			if cfg.Database != "lockgate_test_x" {
				t.Fatalf("result names database %q, want lockgate_test_x", cfg.Database)
			}
		})
	}
}

func TestNewPoolGivesAFreshDatabaseAndDropsIt(t *testing.T) {
	admin := AdminDSN(t)
	ctx := context.Background()

	var name string
	t.Run("use", func(t *testing.T) {
		pool := NewPool(t)
		if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		if !strings.HasPrefix(name, NamePrefix) {
			t.Fatalf("database %q does not start with %q", name, NamePrefix)
		}
		var tables int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables)
		if err != nil {
			t.Fatalf("count tables: %v", err)
		}
		if tables != 0 {
			t.Fatalf("fresh database has %d tables", tables)
		}
		if _, err := pool.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
			t.Fatalf("create table: %v", err)
		}
		other := NewPool(t)
		var otherName string
		if err := other.QueryRow(ctx, "SELECT current_database()").Scan(&otherName); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		if otherName == name {
			t.Fatalf("two NewPool calls share database %q", name)
		}
	})

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("look up database: %v", err)
	}
	if exists {
		t.Fatalf("database %q still exists after its test ended", name)
	}
}
