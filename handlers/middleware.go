package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-playground/validator/v10"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/lockgate/lockgate/api"
)

// requestInfo collects what the access log reports about a request.
type requestInfo struct {
	outcome string
}

type ctxKey int

const requestInfoKey ctxKey = 0

func withRequestInfo(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestInfoKey, &requestInfo{})))
	})
}

// setOutcome records the request's outcome for the access log.
func setOutcome(r *http.Request, outcome string) {
	if info, ok := r.Context().Value(requestInfoKey).(*requestInfo); ok {
		info.outcome = outcome
	}
}

// accessLog logs one line per request: method, path, status, latency,
// resource and outcome. It never logs headers or bodies, so lease ids never
// reach the log.
func accessLog(log zerolog.Logger) func(http.Handler) http.Handler {
	access := hlog.AccessHandler(func(r *http.Request, status, size int, d time.Duration) {
		ev := hlog.FromRequest(r).Info().
			Str("method", r.Method).Str("path", r.URL.Path).Int("status", status).
			Dur("latency", d).Int("size", size)
		if res, ok := strings.CutPrefix(r.URL.Path, "/locks/"); ok {
			ev = ev.Str("resource", res)
		}
		if info, ok := r.Context().Value(requestInfoKey).(*requestInfo); ok && info.outcome != "" {
			ev = ev.Str("outcome", info.outcome)
		}
		ev.Msg("request")
	})
	return func(next http.Handler) http.Handler {
		return hlog.NewHandler(log)(hlog.RequestIDHandler("req_id", "Request-Id")(access(next)))
	}
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
				hlog.FromRequest(r).Error().Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack()).Msg("handler panicked")
				problem(w, r, http.StatusInternalServerError, apiInternal, "unexpected error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// contract enforces openapi.yaml on requests.
type contract struct {
	router routers.Router
	// bounds, if set, says what a field outside the server's configured
	// range must be (see boundsOf).
	bounds func(field string) (reason string, ok bool)
}

func newContract(spec []byte) (*contract, error) {
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("handlers: openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("handlers: openapi.yaml is invalid: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("handlers: openapi.yaml routes: %w", err)
	}
	return &contract{router: router}, nil
}

// enforce reads the body (at most limit bytes: 413 beyond), refuses a body
// that is not JSON (415), and validates parameters, headers and body against
// the OpenAPI document (400 naming the field). Routes the document does not
// know pass through to the router's 404 and 405.
func (c *contract) enforce(limit int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route, params, err := c.router.FindRoute(r)
			if err != nil {
				next.ServeHTTP(w, r)
				return
			}
			if route.Operation.RequestBody == nil {
				// GET and DELETE take no body. One sent anyway is ignored,
				// as RFC 9110 allows, not refused with a 413 or 415 that
				// their contract does not list; it is never read.
				r.Body = http.NoBody
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			if err != nil {
				detail := "body: could not be read"
				var slow *slowBodyError
				if errors.As(err, &slow) {
					detail = "body: " + slow.Error() + "; the connection is closed"
				}
				p := newProblem(r, http.StatusBadRequest, apiInvalid, detail)
				p.Field = "body"
				writeProblem(w, r, p, apiInvalid)
				return
			}
			if int64(len(body)) > limit {
				problem(w, r, http.StatusRequestEntityTooLarge, apiTooLarge, fmt.Sprintf("the body is over %d bytes", limit))
				return
			}
			if len(body) > 0 {
				mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
				if mt != api.MediaJSON {
					problem(w, r, http.StatusUnsupportedMediaType, apiMediaType, "the body must be application/json")
					return
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			in := &openapi3filter.RequestValidationInput{
				Request: r, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			}
			if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
				field, reason := describe(err, c.bounds)
				p := newProblem(r, http.StatusBadRequest, apiInvalid, field+": "+reason)
				p.Field = field
				writeProblem(w, r, p, apiInvalid)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
		})
	}
}

var unknownProperty = regexp.MustCompile(`^property "([^"]+)" is unsupported`)

// describe names the field of a validation error and says what is wrong with
// it, without echoing the value (a header may carry a lease id).
//
// A number outside the contract's range for a field the server bounds more
// tightly (ttl_ms, wait_ms) is described by bounds, so that 0 and 50 both
// name the server's configured range rather than the contract's wider one.
func describe(err error, bounds func(string) (string, bool)) (field, reason string) {
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) {
		return "request", "does not match the API contract"
	}
	var se *openapi3.SchemaError
	hasSchema := errors.As(err, &se)
	switch {
	case re.Parameter != nil:
		field = re.Parameter.Name
		if hasSchema {
			reason = se.Reason
		} else if errors.Is(err, openapi3filter.ErrInvalidRequired) {
			reason = "is required"
		} else {
			reason = "is malformed"
		}
	case hasSchema:
		field = strings.Join(se.JSONPointer(), ".")
		reason = se.Reason
		if se.SchemaField == "minimum" || se.SchemaField == "maximum" {
			if bounds != nil {
				if b, ok := bounds(field); ok {
					reason = b
				}
			}
		}
		if m := unknownProperty.FindStringSubmatch(se.Reason); field == "" && m != nil {
			field, reason = m[1], "is not a known field"
		}
		if field == "" {
			field = "body"
		}
	default:
		field, reason = "body", "is not valid JSON for this operation"
	}
	if reason == "" {
		reason = "is invalid"
	}
	return field, reason
}

// decode reads the (already validated) JSON body into v, refusing unknown
// fields and trailing data, and checks v's validate tags. An empty body
// leaves v at its zero value. It answers the problem itself and returns false
// on a bad body.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		badBody(w, r, err)
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		p := newProblem(r, http.StatusBadRequest, apiInvalid, "body: trailing data after the JSON object")
		p.Field = "body"
		writeProblem(w, r, p, apiInvalid)
		return false
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

func badBody(w http.ResponseWriter, r *http.Request, err error) {
	field := "body"
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		field = te.Field
	}
	p := newProblem(r, http.StatusBadRequest, apiInvalid, field+": "+err.Error())
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
