package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/fencing"
)

// maxValueBytes limits a PUT body; larger bodies get 413.
const maxValueBytes = 1 << 20

// keyPattern is what a key may look like: short, and safe in a URL path, a
// Redis key and a log line without escaping.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)

// store is the fenced key-value store behind the HTTP API: fencing.Memory,
// redisfence.Guard or pgfence.Guard.
type store interface {
	Put(ctx context.Context, resource, key string, token uint64, value []byte) error
	Get(ctx context.Context, key string) (fencing.Record, error)
}

var (
	errTooLarge   = fmt.Errorf("value is larger than %d bytes", maxValueBytes)
	errInvalidKey = fmt.Errorf("%w: keys are 1 to 200 characters of A-Z a-z 0-9 . _ : -", fencing.ErrInvalidKey)
)

type server struct {
	store store
	log   zerolog.Logger
}

// newHandler returns fencedkv's HTTP API:
//
//	PUT /kv/{key}  body = value (at most 1 MiB), Fencing-Token required,
//	               Fencing-Resource optional (default: the key).
//	               204 written; 409 stale token; 400 bad token or key; 413 too large.
//	GET /kv/{key}  200 with the raw value as body and the Fencing-Token and
//	               Fencing-Resource headers of the write that stored it; 404 if absent.
//	GET /healthz   200 while the process serves requests.
//	GET /readyz    200 while the store answers (a ping, when the store
//	               has one); 503 otherwise.
//
// Every error is an RFC 9457 application/problem+json body whose type is a
// urn:lockgate:problem: URN.
func newHandler(st store, log zerolog.Logger) http.Handler {
	s := &server{store: st, log: log}
	r := chi.NewRouter()
	r.Use(s.accessLog, middleware.Recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, problemNotFound, "no such route: "+r.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusMethodNotAllowed, problemMethodNotAllowed, r.Method+" is not supported here")
	})
	r.Get("/readyz", s.readyz)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	r.Route("/kv/{key}", func(r chi.Router) {
		r.Use(validKey)
		r.Get("/", s.get)
		r.With(fencing.Middleware(&fencing.MiddlewareOptions{Resource: resourceOf})).Put("/", s.put)
	})
	return r
}

// validKey answers 400 for keys outside keyPattern before anything else
// looks at the request.
func validKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !keyPattern.MatchString(chi.URLParam(r, "key")) {
			fencing.WriteError(w, errInvalidKey)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// resourceOf is the fenced resource of a PUT: the Fencing-Resource header,
// or the key itself. One lock can so guard several keys.
func resourceOf(r *http.Request) string {
	if res := r.Header.Get(fencing.ResourceHeader); res != "" {
		return res
	}
	return chi.URLParam(r, "key")
}

func (s *server) put(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "key")
	token, _ := fencing.TokenFromContext(r.Context())
	resource, _ := fencing.ResourceFromContext(r.Context())
	if r.ContentLength > maxValueBytes {
		s.fail(w, r, errTooLarge)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValueBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			err = errTooLarge
		}
		s.fail(w, r, err)
		return
	}
	// The store checks the token and writes the value in one step.
	if err := s.store.Put(r.Context(), resource, key, token, value); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	rec, err := s.store.Get(r.Context(), chi.URLParam(r, "key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(rec.Value)))
	h.Set(fencing.TokenHeader, strconv.FormatUint(rec.Token, 10))
	h.Set(fencing.ResourceHeader, rec.Resource)
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(rec.Value)
}

// fail is the one place that turns errors into responses.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, fencing.ErrNotFound):
		writeStatus(w, http.StatusNotFound, problemNoValue, "no value is stored under this key")
	case errors.Is(err, errTooLarge):
		writeStatus(w, http.StatusRequestEntityTooLarge, problemTooLarge, err.Error())
	case errors.Is(err, fencing.ErrStaleToken), errors.Is(err, fencing.ErrInvalidToken),
		errors.Is(err, fencing.ErrMissingToken), errors.Is(err, fencing.ErrInvalidResource),
		errors.Is(err, fencing.ErrInvalidKey):
		fencing.WriteError(w, err)
	case r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
		s.log.Info().Err(err).Str("path", r.URL.Path).Msg("request canceled")
		writeStatus(w, http.StatusServiceUnavailable, problemUnavailable, "the request was canceled")
	default:
		s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("store failed")
		// The cause goes to the log, not to the client.
		writeStatus(w, http.StatusInternalServerError, problemInternal, "the store failed; see the server log")
	}
}

// Problem types of fencedkv's own answers (those of the fencing checks are
// fencing.Problem*).
const (
	problemNotFound         = "urn:lockgate:problem:not-found"
	problemNoValue          = "urn:lockgate:problem:no-value"
	problemMethodNotAllowed = "urn:lockgate:problem:method-not-allowed"
	problemTooLarge         = "urn:lockgate:problem:value-too-large"
	problemUnavailable      = "urn:lockgate:problem:store-unavailable"
	problemInternal         = "urn:lockgate:problem:internal"
)

// pinger is a store that can tell whether its backend answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// readyTimeout bounds the store ping of /readyz.
const readyTimeout = time.Second

// readyz answers 200 while the store answers its ping (a store without one,
// the in-memory store, is always ready), else 503 with Retry-After.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if p, ok := s.store.(pinger); ok {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			s.log.Warn().Err(err).Msg("readyz: the store does not answer")
			w.Header().Set("Retry-After", "1")
			writeStatus(w, http.StatusServiceUnavailable, problemUnavailable, "the store does not answer")
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ready\n")
}

// writeStatus writes a problem+json body of type typ, whose title is the
// status text.
func writeStatus(w http.ResponseWriter, status int, typ, detail string) {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{typ, http.StatusText(status), status, detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// accessLog writes one line per request. Values and headers are not logged.
func (s *server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		s.log.Info().
			Str("method", r.Method).
			Str("path", r.URL.Path).
			Int("status", status).
			Int("bytes", ww.BytesWritten()).
			Dur("duration_ms", time.Since(start)).
			Str("remote", r.RemoteAddr).
			Msg("request")
	})
}
