package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencing"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

const (
	adminToken  = "admin-token-0123456789abcdef"
	readerToken = "reader-token-0123456789abcdef"
)

// memGateway is the gateway over the embedded in-memory node, with access
// control on when withAuth.
func memGateway(t *testing.T, withAuth bool) string {
	t.Helper()
	var opts handlers.Options
	if withAuth {
		p, err := auth.Parse(strings.NewReader(adminToken + " * *\n" + readerToken + " GET *\n"))
		if err != nil {
			t.Fatal(err)
		}
		opts.Middleware = append(opts.Middleware, p.Middleware)
	}
	srv := gatewaytest.InProcess(t, []lockcore.Node{memnode.New(nil)}, &gatewaytest.InProcessOptions{Handlers: &opts})
	return srv.URL
}

// Every answer of the gateway maps to the sentinel of its problem type,
// with the retry-after of a 409 and the field of a 400.
func TestErrorsMatchTheProblemTypes(t *testing.T) {
	ctx := context.Background()
	url := memGateway(t, true)
	admin, err := client.New(url, &client.Options{BearerToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	held, err := admin.Acquire(ctx, "held", &client.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reader, _ := client.New(url, &client.Options{BearerToken: readerToken})
	anonymous, _ := client.New(url, nil)
	other := client.NewLeaseID()

	tests := []struct {
		name      string
		call      func() error
		want      error
		transient bool
		check     func(t *testing.T, pe *client.ProblemError)
	}{
		{"acquire of a held lock", func() error {
			_, err := admin.Acquire(ctx, "held", nil)
			return err
		}, client.ErrTaken, false, func(t *testing.T, pe *client.ProblemError) {
			if pe.RetryAfter <= 0 || pe.RetryAfter > 10*time.Second {
				t.Errorf("RetryAfter = %v, want the holder's remaining TTL", pe.RetryAfter)
			}
		}},
		{"extend by another lease", func() error {
			_, err := admin.Extend(ctx, "held", other, nil)
			return err
		}, client.ErrHeldByOther, false, nil},
		{"extend of a free lock", func() error {
			_, err := admin.Extend(ctx, "free", other, nil)
			return err
		}, client.ErrNotHeld, false, nil},
		{"release with a wrong token", func() error {
			return admin.Release(ctx, "held", held.LeaseID, held.FencingToken+1)
		}, client.ErrTokenMismatch, false, nil},
		{"a TTL below the gateway's minimum", func() error {
			_, err := admin.Acquire(ctx, "bad-ttl", &client.AcquireOptions{TTL: time.Millisecond})
			return err
		}, client.ErrBadRequest, false, func(t *testing.T, pe *client.ProblemError) {
			if pe.Field != "ttl_ms" {
				t.Errorf("Field = %q, want ttl_ms", pe.Field)
			}
		}},
		{"a bad resource name", func() error {
			_, err := admin.Get(ctx, "no spaces")
			return err
		}, client.ErrBadRequest, false, nil},
		{"no bearer token", func() error {
			_, err := anonymous.Get(ctx, "held")
			return err
		}, client.ErrUnauthorized, false, nil},
		{"a token that may not PUT", func() error {
			_, err := reader.Acquire(ctx, "held", nil)
			return err
		}, client.ErrForbidden, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if client.Transient(err) != tt.transient {
				t.Errorf("Transient = %v", !tt.transient)
			}
			var pe *client.ProblemError
			if !errors.As(err, &pe) {
				t.Fatalf("err %T is not a *ProblemError", err)
			}
			if strings.Contains(err.Error(), adminToken) || strings.Contains(err.Error(), held.LeaseID) {
				t.Errorf("the error shows a secret: %v", err)
			}
			if tt.check != nil {
				tt.check(t, pe)
			}
		})
	}
	if info, err := reader.Get(ctx, "held"); err != nil || info.FencingToken != held.FencingToken {
		t.Errorf("Get = %+v, %v", info, err)
	}
}

// A majority of the nodes down: 503 no quorum, a transient error; no
// gateway at all: a *NoAnswerError, transient too.
func TestTransientErrors(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	g.nodes[0].Kill()
	g.nodes[1].Kill()
	_, err := c.Acquire(context.Background(), "no-quorum", nil)
	if !errors.Is(err, client.ErrNoQuorum) || !client.Transient(err) {
		t.Errorf("with a majority down: %v, want a transient ErrNoQuorum", err)
	}
	var pe *client.ProblemError
	if errors.As(err, &pe) && pe.RetryAfter != time.Second {
		t.Errorf("RetryAfter = %v, want the Retry-After header's 1s", pe.RetryAfter)
	}
	dead := newClient(t, "http://127.0.0.1:1")
	_, err = dead.Acquire(context.Background(), "x", nil)
	var na *client.NoAnswerError
	if !errors.As(err, &na) || !client.Transient(err) {
		t.Errorf("no gateway: %v, want a transient *NoAnswerError", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = c.Get(ctx, "x"); !errors.Is(err, context.Canceled) || client.Transient(err) {
		t.Errorf("cancelled: %v, want context.Canceled, not transient", err)
	}
}

// The answer to the first PUT is lost (the connection is cut after the
// gateway granted the lock): Lock retries with the same lease id, and gets
// the same lock back (200, same token), not a second grant.
func TestLockRetriesALostAnswerWithTheSameLeaseID(t *testing.T) {
	g := startGateway(t, 3)
	var mu sync.Mutex
	var leaseIDs []string
	puts := 0
	g.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.Method != http.MethodPut {
			next.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		puts++
		first := puts == 1
		leaseIDs = append(leaseIDs, r.Header.Get(api.HeaderLeaseID))
		mu.Unlock()
		if first {
			next.ServeHTTP(httptest.NewRecorder(), r) // granted, answer dropped
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		next.ServeHTTP(w, r)
	})
	c := newClient(t, g.URL)
	l, err := c.Lock(context.Background(), "lost-answer", &client.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if len(leaseIDs) != 2 || leaseIDs[0] == "" || leaseIDs[0] != leaseIDs[1] || l.LeaseID() != leaseIDs[0] {
		t.Fatalf("PUTs carried lease ids %d, want two, equal, the lock's", len(leaseIDs))
	}
	if l.FencingToken() != 1 {
		t.Errorf("token %d, want 1: the retry got a second grant", l.FencingToken())
	}
}

// A waited acquisition: the lock is handed over when the holder releases
// it, and the waiter's Done is open with a validity ahead of it, even though
// the answer came long after the request was sent.
func TestLockWaitsForTheHolder(t *testing.T) {
	g := startGateway(t, 3)
	c := newClient(t, g.URL)
	ctx := context.Background()
	first, err := c.Lock(ctx, "waited", &client.LockOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "waited", &client.LockOptions{TTL: time.Second}); !errors.Is(err, client.ErrTaken) {
		t.Fatalf("without a wait: %v, want ErrTaken", err)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond) // longer than a TTL: renewed meanwhile
		first.Release(ctx)
	}()
	start := time.Now()
	second, err := c.Lock(ctx, "waited", &client.LockOptions{TTL: time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	waited := time.Since(start)
	if waited < 1400*time.Millisecond {
		t.Errorf("acquired after %v, before the holder released", waited)
	}
	if second.FencingToken() <= first.FencingToken() {
		t.Errorf("token %d after %d", second.FencingToken(), first.FencingToken())
	}
	select {
	case <-second.Done():
		t.Fatalf("Done closed at once: %v", second.Err())
	default:
	}
	if left := time.Until(second.ValidUntil()); left < 500*time.Millisecond {
		t.Errorf("validity left %v after a wait of %v, want most of a TTL", left, waited)
	}
}

// SetFencingHeaders writes what the fencing package's middleware reads.
func TestSetFencingHeadersMatchesTheFencingMiddleware(t *testing.T) {
	if fencing.TokenHeader != api.HeaderFencingToken {
		t.Fatalf("fencing reads %q, the API sends %q", fencing.TokenHeader, api.HeaderFencingToken)
	}
	var gotToken uint64
	var gotResource string
	h := fencing.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotToken, _ = fencing.TokenFromContext(r.Context())
		gotResource, _ = fencing.ResourceFromContext(r.Context())
	}))
	req := httptest.NewRequest(http.MethodPut, "/kv/x", nil)
	client.SetFencingHeaders(req, "orders", 42)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || gotToken != 42 || gotResource != "orders" {
		t.Fatalf("middleware answered %d, saw token %d resource %q", rec.Code, gotToken, gotResource)
	}
}

func TestNewRefusesABadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := client.New(u, nil); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}
