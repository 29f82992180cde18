package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"time"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/go-playground/validator/v10"
	"github.com/rs/xid"
	"github.com/rs/zerolog"
)

// reqState is what the middleware keeps about one request, in one
// allocation made by accessLog: the response writer every later middleware
// and handler writes through (it sees the status and the size), the request
// id, what the handlers record for the logs (outcome, fencing token), and
// the body the contract middleware read.
type reqState struct {
	w       respWriter
	body    bodyReader
	log     *zerolog.Logger
	id      string
	outcome string
	token   int64
	// permit is the permit number a semaphore request acted on, plus one
	// (0: none), for the audit line.
	permit int
	// idHeader backs the Request-Id header's value.
	idHeader [1]string
	// in is the contract middleware's openapi3filter input.
	in openapi3filter.RequestValidationInput
	// nodes reports the lock nodes' states for a no-quorum answer's
	// detail; nil when the Locker does not report them.
	nodes nodeReporter
}

type ctxKey int

const stateKey ctxKey = 0

// stateOf returns the request's state, or nil outside accessLog.
func stateOf(r *http.Request) *reqState {
	st, _ := r.Context().Value(stateKey).(*reqState)
	return st
}

// setOutcome records the request's outcome for the access log.
func setOutcome(r *http.Request, outcome string) {
	if st := stateOf(r); st != nil {
		st.outcome = outcome
	}
}

// logEvent starts a log line about the request at level, with its req_id
// first, as a request logger with req_id in its context would write it
// (zerolog puts a logger's context right after the level). It is nil, which
// zerolog ignores, when the level is off.
func logEvent(r *http.Request, level zerolog.Level) *zerolog.Event {
	st := stateOf(r)
	if st == nil {
		return nil
	}
	return st.log.WithLevel(level).Str("req_id", st.id)
}

// hdrRequestID is the response header with the request id, in canonical
// form so that it is set without canonicalising it again.
var hdrRequestID = http.CanonicalHeaderKey("Request-Id")

// accessLog gives each request an id (a 20-character xid, answered in the
// Request-Id header and logged as req_id) and logs one line per request:
// method, path, status, latency, size, resource and outcome. It never logs
// headers or bodies, so lease ids never reach the log. The line is written
// even when a panic goes through (http.ErrAbortHandler).
func accessLog(log zerolog.Logger, nodes nodeReporter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			st := &reqState{log: &log, id: xid.New().String(), nodes: nodes}
			st.w.ResponseWriter = w
			st.idHeader[0] = st.id
			w.Header()[hdrRequestID] = st.idHeader[:]
			r = r.WithContext(context.WithValue(r.Context(), stateKey, st))
			defer st.logAccess(r, start)
			next.ServeHTTP(&st.w, r)
		})
	}
}

func (st *reqState) logAccess(r *http.Request, start time.Time) {
	ev := st.log.Info()
	if ev == nil {
		return
	}
	ev = ev.Str("req_id", st.id).Str("method", r.Method).Str("path", r.URL.Path).Int("status", st.w.status).
		Dur("latency", time.Since(start)).Int("size", st.w.size)
	if res, ok := strings.CutPrefix(r.URL.Path, "/locks/"); ok {
		ev = ev.Str("resource", res)
	}
	if st.outcome != "" {
		ev = ev.Str("outcome", st.outcome)
	}
	ev.Msg("request")
}

// respWriter is the writer accessLog hands on. It remembers the status (the
// first WriteHeader's, or 200 at the first Write; 0 while nothing is
// written) and the bytes written, and passes only the first WriteHeader on.
type respWriter struct {
	http.ResponseWriter
	status      int
	size        int
	wroteHeader bool
}

func (w *respWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *respWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// deadlines).
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answered is the status answered so far, 200 when nothing was written
// (what net/http then sends).
func (w *respWriter) answered() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// recoverer turns a panic into a logged 500 problem instead of a dropped
// connection.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				logEvent(r, zerolog.ErrorLevel).Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack()).Msg("handler panicked")
				problem(w, r, http.StatusInternalServerError, apiInternal, "unexpected error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// decode reads the (already validated) JSON body into v, refusing unknown
// fields and trailing data, and checks v's validate tags, which hold the
// rules openapi.yaml cannot state (see contract). An empty body
// leaves v at its zero value. It answers the problem itself and returns false
// on a bad body.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if b, ok := r.Body.(*bodyReader); !ok || b.Len() > 0 {
		// An empty body, which the decoder would read as io.EOF twice, is
		// not given to one.
		err := decodeJSON(r.Body, v)
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && ok && strings.HasPrefix(te.Value, "number") {
			// A whole number spelt 1e4 or 10000.0: the contract admits it.
			if whole := wholeNumbers(rereadAll(b)); whole != nil {
				err = decodeJSON(bytes.NewReader(whole), v)
			}
		}
		if errors.Is(err, errTrailing) {
			p := newProblem(r, http.StatusBadRequest, apiInvalid, "body: trailing data after the JSON object")
			p.Field = "body"
			writeProblem(w, r, p, apiInvalid)
			return false
		}
		if err != nil {
			badBody(w, r, err)
			return false
		}
	}
	if err := s.validate.Struct(v); err != nil {
		var ve validator.ValidationErrors
		if errors.As(err, &ve) && len(ve) > 0 {
			p := newProblem(r, http.StatusBadRequest, apiInvalid, ve[0].Field()+": fails the "+ve[0].Tag()+" rule")
			p.Field = ve[0].Field()
			writeProblem(w, r, p, apiInvalid)
			return false
		}
		badBody(w, r, err)
		return false
	}
	return true
}

// errTrailing is decodeJSON's error for data after the JSON value.
var errTrailing = errors.New("trailing data after the JSON object")

// decodeJSON decodes one JSON value from rd into v, refusing unknown fields
// and trailing data (errTrailing).
func decodeJSON(rd io.Reader, v any) error {
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailing
	}
	return nil
}

func badBody(w http.ResponseWriter, r *http.Request, err error) {
	field, reason := "body", err.Error()
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			field = te.Field
		}
		reason = typeReason(te.Type)
	}
	p := newProblem(r, http.StatusBadRequest, apiInvalid, field+": "+reason)
	p.Field = field
	writeProblem(w, r, p, apiInvalid)
}

// newValidator returns a validator that names fields by their JSON names and
// knows the "printable" rule.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name
	})
	_ = v.RegisterValidation("printable", func(fl validator.FieldLevel) bool {
		return strings.IndexFunc(fl.Field().String(), func(c rune) bool { return !unicode.IsPrint(c) }) < 0
	})
	return v
}
