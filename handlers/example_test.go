package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

// A client takes a lock, another is refused while it is held, anyone can see
// who holds it, the holder releases it, and the next holder gets a higher
// fencing token.
func ExampleNew() {
	locker, err := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	h, err := handlers.New(locker, nil)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	call := func(method, body string, header ...string) (*http.Response, map[string]any) {
		req, _ := http.NewRequest(method, srv.URL+"/locks/orders:42", strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp, v
	}

	resp, lease := call(http.MethodPut, `{"ttl_ms":10000,"owner":"worker-7"}`)
	leaseID, etag := resp.Header.Get(api.HeaderLeaseID), resp.Header.Get(api.HeaderETag)
	fmt.Println("acquire:", resp.StatusCode, resp.Header.Get("Location"), "token", lease["fencing_token"], "ETag", etag)

	resp, problem := call(http.MethodPut, "")
	fmt.Println("another client:", resp.StatusCode, problem["type"], "Retry-After", resp.Header.Get(api.HeaderRetryAfter))

	resp, info := call(http.MethodGet, "")
	fmt.Println("inspect:", resp.StatusCode, info["owner"], "token", info["fencing_token"], "lease id shown:", info["lease_id"] != nil)

	resp, _ = call(http.MethodDelete, "", api.HeaderLeaseID, leaseID, api.HeaderIfMatch, etag)
	fmt.Println("release:", resp.StatusCode)

	resp, lease = call(http.MethodPut, "")
	fmt.Println("next holder:", resp.StatusCode, "token", lease["fencing_token"])
	// Output:
	// acquire: 201 /locks/orders:42 token 1 ETag "1"
	// another client: 409 urn:lockgate:problem:lock-taken Retry-After 10
	// inspect: 200 worker-7 token 1 lease id shown: false
	// release: 204
	// next holder: 201 token 2
}
