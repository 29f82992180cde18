package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// Take a lock, work under its Context, write to fenced storage with its
// token, and release it. The gateway here is the embedded one; the storage
// is the fencing package's in-memory store behind its middleware.
func ExampleClient_Lock() {
	locker, _ := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	defer locker.Close()
	h, _ := handlers.New(locker, nil)
	gateway := httptest.NewServer(h)
	defer gateway.Close()
	storage := newFencedStore()
	defer storage.Close()

	c, err := client.New(gateway.URL, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lock, err := c.Lock(ctx, "reports", &client.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		fmt.Println("not locked:", err)
		return
	}
	fmt.Println("locked with token", lock.FencingToken())

	// The work: a request that ends if the lock is lost, and carries the
	// fencing token so the store can refuse it if a newer holder has written.
	req, _ := http.NewRequestWithContext(lock.Context(), http.MethodPut, storage.URL+"/report.txt",
		strings.NewReader("quarterly figures"))
	lock.SetFencingHeaders(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("write failed:", err)
	} else {
		resp.Body.Close()
		fmt.Println("write:", resp.Status)
	}

	if err := lock.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	fmt.Println("Done closed because:", lock.Err())
	// Output:
	// locked with token 1
	// write: 204 No Content
	// Done closed because: client: lock released
}

// newFencedStore is a storage service that refuses stale fencing tokens.
func newFencedStore() *httptest.Server {
	store := fencing.NewMemory()
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := fencing.TokenFromContext(r.Context())
		resource, _ := fencing.ResourceFromContext(r.Context())
		body, _ := io.ReadAll(r.Body)
		if err := store.Put(r.Context(), resource, strings.TrimPrefix(r.URL.Path, "/"), token, body); err != nil {
			fencing.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return httptest.NewServer(fencing.Middleware(nil)(write))
}
