package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/lockgate/lockgate/fencing"
)

// A storage service puts Middleware in front of its write route. The
// middleware validates the token; the handler writes through Put, which
// checks the token and stores the value in one step, and reports a stale
// token with WriteError.
func ExampleMiddleware() {
	store := fencing.NewMemory()
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := fencing.TokenFromContext(r.Context())
		resource, _ := fencing.ResourceFromContext(r.Context())
		body, _ := io.ReadAll(r.Body)
		if err := store.Put(r.Context(), resource, "report.txt", token, body); err != nil {
			fencing.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(fencing.Middleware(nil)(write))
	defer srv.Close()

	send := func(token, body string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader(body))
		req.Header.Set(fencing.TokenHeader, token)
		req.Header.Set(fencing.ResourceHeader, "reports")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		problem, _ := io.ReadAll(resp.Body)
		fmt.Printf("token %q: %d\n", token, resp.StatusCode)
		if len(problem) > 0 {
			fmt.Printf("  %s %s", resp.Header.Get("Content-Type"), problem)
		}
	}
	send("5", "draft by client 1")
	send("7", "final by client 2")
	send("5", "late write by client 1 after a long pause")
	send("", "no token")

	rec, _ := store.Get(context.Background(), "report.txt")
	fmt.Printf("stored: %q by token %d\n", rec.Value, rec.Token)
	// Output:
	// token "5": 204
	// token "7": 204
	// token "5": 409
	//   application/problem+json {"type":"urn:lockgate:problem:stale-fencing-token","title":"Stale fencing token","status":409,"detail":"token 5 for resource \"reports\" is lower than token 7, which was already admitted; the lock has passed to a newer holder","resource":"reports","token":5,"highest_token":7}
	// token "": 400
	//   application/problem+json {"type":"urn:lockgate:problem:missing-fencing-token","title":"Missing fencing token","status":400,"detail":"writes need a Fencing-Token header with the token of the lock grant"}
	// stored: "final by client 2" by token 7
}

func ExampleMemory_Put() {
	ctx := context.Background()
	store := fencing.NewMemory()
	fmt.Println(store.Put(ctx, "orders", "order-17", 5, []byte("paid")))
	fmt.Println(store.Put(ctx, "orders", "order-17", 5, []byte("shipped"))) // same holder again
	err := store.Put(ctx, "orders", "order-17", 4, []byte("cancelled"))
	var stale *fencing.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("refused:", stale.Token, "<", stale.Highest)
	}
	fmt.Println(errors.Is(err, fencing.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// refused: 4 < 5
	// true
}
