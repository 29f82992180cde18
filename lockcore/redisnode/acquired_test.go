package redisnode_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/redistest"
)

// A grant watch shares the hub's connection with the release watches and
// its care for a lost connection: a grant published while the connection
// was down is not missed, the watch is notified once it is subscribed
// again. The connection is killed and the grant published in one MULTI,
// so the grant itself can only be missed.
func TestAGrantWatchHearsOfAGrantMissedWhileItsConnectionWasDown(t *testing.T) {
	srv := redistest.Start(t, nil)
	n := newNode(t, srv)
	ctx := context.Background()
	heard := make(chan struct{}, 16)
	stop, err := n.WatchAcquired(ctx, "blip", func() {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true})
	defer admin.Close()
	for round := range 3 {
		_, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ClientKillByFilter(ctx, "TYPE", "pubsub")
			p.Publish(ctx, "lockgate:{blip}:acquired", "1")
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: MULTI: %v", round, err)
		}
		select {
		case <-heard:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the watch never heard of the grant made while its connection was down", round)
		}
	}
}
