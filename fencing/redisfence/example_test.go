package redisfence_test

import (
	"context"
	"errors"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/fencing/redisfence"
)

// This example needs a Redis server, so it is compiled but not run.
func ExampleGuard_Put() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	guard := redisfence.New(client, nil)
	if err := guard.Put(ctx, "report.txt", "report.txt", 7, []byte("final")); err != nil {
		log.Fatal(err)
	}
	err := guard.Put(ctx, "report.txt", "report.txt", 5, []byte("late"))
	var stale *fencing.StaleTokenError
	if errors.As(err, &stale) {
		log.Printf("refused: token %d, highest %d", stale.Token, stale.Highest) // refused: token 5, highest 7
	}
}
