package kubeelect_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/kubeelect"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// fencedStore is what the example controller writes to: a store that
// refuses a write whose token is below one it has admitted for the
// resource (fencing.Memory here; fencing/pgfence or fencing/redisfence
// for data that outlives the process, or a service behind
// fencing.Middleware).
type fencedStore interface {
	Put(ctx context.Context, resource, key string, token uint64, value []byte) error
}

// controller is the example controller: client-go's leader election over
// a kubeelect.Lock, and while it leads, work whose every write carries the
// term its leadership began with.
type controller struct {
	lock  *kubeelect.Lock
	store fencedStore
	// The elector's settings; the lock's TTL is lease.
	lease, renew, retry time.Duration
	// releaseOnCancel: resign when the run's context ends (a graceful
	// stop). Without it the lock stays held until its TTL runs out, as
	// when the process is killed.
	releaseOnCancel bool
	// work runs while the controller leads; write stores value under key
	// with the term. It should return when ctx ends (leadership lost).
	work func(ctx context.Context, write func(key string, value []byte) error)
	// stopped, if not nil, is called when the controller stops leading
	// (or stops campaigning without having led).
	stopped func()
}

// run campaigns until ctx ends. The term is read once, when leadership
// begins, and every write of that leadership carries it: a write that
// reaches the store after a later leader's (a stall, a slow network) is
// refused with fencing.ErrStaleToken, whatever the deposed leader's
// clock or elector believe. The write's context is not the leadership's:
// once sent, a write is the store's to finish, as over a network, and the
// fence, not the sender, decides whether it lands.
func (c *controller) run(ctx context.Context) {
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            c.lock,
		LeaseDuration:   c.lease,
		RenewDeadline:   c.renew,
		RetryPeriod:     c.retry,
		ReleaseOnCancel: c.releaseOnCancel,
		Name:            "example-controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				term := uint64(c.lock.Term())
				c.work(ctx, func(key string, value []byte) error {
					return c.store.Put(context.WithoutCancel(ctx), "example-controller", key, term, value)
				})
			},
			OnStoppedLeading: func() {
				if c.stopped != nil {
					c.stopped()
				}
			},
		},
	})
}

// A controller elected with client-go's leaderelection over lockgate
// passes its term, the lock's fencing token, with every write to a fenced
// store, which refuses any later write with an older term. Here one
// candidate leads, writes, and resigns.
// TestAStalledLeadersLateWriteIsRefused runs two such controllers with a
// stalled leader.
func Example_controller() {
	// A gateway over three in-memory nodes; in production, the URL of a
	// lockgate deployment.
	locker, _ := lockcore.New([]lockcore.Node{memnode.New(nil), memnode.New(nil), memnode.New(nil)}, nil)
	defer locker.Close()
	h, _ := handlers.New(locker, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	cl, _ := client.New(srv.URL, nil)

	store := fencing.NewMemory()
	ctx, stop := context.WithCancel(context.Background())
	lock := kubeelect.New(cl, "example-controller", "pod-a", nil)
	var term uint64
	c := &controller{
		lock: lock, store: store,
		lease: 15 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second,
		releaseOnCancel: true,
		work: func(ctx context.Context, write func(string, []byte) error) {
			term = uint64(lock.Term())
			fmt.Println("leading with a term:", term > 0)
			fmt.Println("write:", write("config", []byte("replicas=3")))
			stop() // the controller's work is done: resign
		},
		stopped: func() { fmt.Println("stopped leading") },
	}
	c.run(ctx)

	rec, _ := store.Get(context.Background(), "config")
	fmt.Printf("stored %q with the term %v\n", rec.Value, rec.Token == term)
	// Output:
	// leading with a term: true
	// write: <nil>
	// stopped leading
	// stored "replicas=3" with the term true
}
