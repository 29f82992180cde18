package handlers

import (
	"net/http"
	"strings"
	"time"
)

// Operation names the API operation a request is for, from its method and
// path alone, so that requests refused before routing (a 400 from the
// contract, a 401 from authentication) are counted under their operation:
// "acquire", "extend", "release" and "inspect" for PUT, PATCH, DELETE and GET
// on /locks/{resource}; "list" for GET /locks; "healthz", "livez", "readyz",
// "openapi" and "metrics" for those GETs; "ui" for GETs of the page (/ui
// and /ui/...); "permit_acquire", "permit_extend", "permit_release" and
// "semaphore_inspect" for a semaphore's routes;
// "rw_acquire", "rw_extend", "rw_release" and "rw_inspect" for a
// readers-writer lock's; "set_acquire", "set_extend", "set_release" and
// "set_inspect" for a lock set's; "other" for anything else. The result never contains the
// resource name, so it is safe as a metric label.
func Operation(method, path string) string {
	if rest, ok := strings.CutPrefix(path, semaphorePrefix); ok {
		return semaphoreOperation(method, rest)
	}
	if rest, ok := strings.CutPrefix(path, rwPrefix); ok {
		return rwOperation(method, rest)
	}
	if rest, ok := strings.CutPrefix(path, setPrefix); ok {
		return setOperation(method, rest)
	}
	if rest, ok := strings.CutPrefix(path, "/locks/"); ok {
		if rest == "" || strings.Contains(rest, "/") {
			return "other"
		}
		switch method {
		case http.MethodPut:
			return "acquire"
		case http.MethodPatch:
			return "extend"
		case http.MethodDelete:
			return "release"
		case http.MethodGet:
			return "inspect"
		}
		return "other"
	}
	if method != http.MethodGet {
		return "other"
	}
	switch path {
	case "/healthz":
		return "healthz"
	case "/livez":
		return "livez"
	case "/readyz":
		return "readyz"
	case "/openapi.yaml":
		return "openapi"
	case "/metrics":
		return "metrics"
	case "/locks":
		return "list"
	case "/ui":
		return "ui"
	}
	if strings.HasPrefix(path, "/ui/") {
		return "ui"
	}
	return "other"
}

// observe calls fn once per request with its operation, outcome, status and
// duration. It runs inside the recoverer, so a panic is reported here as the
// 500 the recoverer is about to answer. The status is the one accessLog's
// writer saw: nothing between accessLog and observe writes, but for the
// recoverer's 500 after a panic, which observe reports itself.
func observe(fn func(op, outcome string, status int, d time.Duration)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			op := Operation(r.Method, r.URL.Path)
			defer func() {
				if v := recover(); v != nil {
					if v != http.ErrAbortHandler {
						fn(op, apiInternal.outcome, http.StatusInternalServerError, time.Since(start))
					}
					panic(v)
				}
			}()
			next.ServeHTTP(w, r)
			outcome, status := "", http.StatusOK
			if st := stateOf(r); st != nil {
				outcome, status = st.outcome, st.w.answered()
			}
			if outcome == "" {
				// Written by a Middleware such as access control, which
				// cannot record an outcome.
				switch status {
				case http.StatusUnauthorized:
					outcome = "unauthorized"
				case http.StatusForbidden:
					outcome = "forbidden"
				}
			}
			fn(op, outcome, status, time.Since(start))
		})
	}
}
