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
// on /locks/{resource}; "healthz", "readyz", "openapi" and "metrics" for
// those GETs; "other" for anything else. The result never contains the
// resource name, so it is safe as a metric label.
func Operation(method, path string) string {
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
	case "/readyz":
		return "readyz"
	case "/openapi.yaml":
		return "openapi"
	case "/metrics":
		return "metrics"
	}
	return "other"
}

// observe calls fn once per request with its operation, outcome, status and
// duration. It runs inside the recoverer, so a panic is reported here as the
// 500 the recoverer is about to answer.
func observe(fn func(op, outcome string, status int, d time.Duration)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			sw := &statusWriter{ResponseWriter: w}
			op := Operation(r.Method, r.URL.Path)
			defer func() {
				if v := recover(); v != nil {
					if v != http.ErrAbortHandler {
						fn(op, apiInternal.outcome, http.StatusInternalServerError, time.Since(start))
					}
					panic(v)
				}
			}()
			next.ServeHTTP(sw, r)
			outcome := ""
			if info, ok := r.Context().Value(requestInfoKey).(*requestInfo); ok {
				outcome = info.outcome
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
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

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
