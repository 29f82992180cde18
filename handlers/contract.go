package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/lockgate/lockgate/api"
)

// contract enforces openapi.yaml on requests: kin-openapi's gorillamux
// router finds a request's operation and openapi3filter.ValidateRequest
// checks its parameters, headers and body against it.
//
// Which check is whose: every rule the document can state about a request
// (types, required fields, the fixed ranges of ttl_ms, wait_ms and permits,
// the length of owner, name patterns, unknown fields) is checked here and
// only here, for every HTTP request. What the document cannot state is
// checked after it: the validate tags of package api (go-playground
// validator, run by server.decode) check that an owner is printable, and
// lockcore checks the server's configured bounds (-min-ttl, -max-ttl,
// -max-wait) for every caller, HTTP or not; bounds words lockcore's answer
// for a number outside the document's range too, so both say the same.
type contract struct {
	router routers.Router
	// bounds, if set, says what a field outside the server's configured
	// range must be (see boundsOf).
	bounds func(field string) (reason string, ok bool)
}

// validationOptions are openapi3filter's options for every request:
// authentication is access control's business (Options.Middleware), not the
// contract's.
var validationOptions = &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}

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

// bodyReader is the request body as the contract middleware read it, handed
// again to each reader: openapi3filter and then the handler.
type bodyReader struct{ bytes.Reader }

// Close does nothing: the body is in memory.
func (*bodyReader) Close() error { return nil }

// reread is the body from its start again (http.Request.GetBody), so that
// openapi3filter, which reads the body, gives it back without copying it.
func (st *reqState) reread() (io.ReadCloser, error) {
	_, err := st.body.Seek(0, io.SeekStart)
	return &st.body, err
}

// readBody reads at most limit+1 bytes of body, as io.ReadAll would, into a
// buffer sized by the request's Content-Length when it is known and at most
// limit.
func readBody(body io.Reader, size, limit int64) ([]byte, error) {
	n := 512
	if size >= 0 && size <= limit {
		n = int(size) + 1 // the last byte lets the EOF be read without growing
	}
	b := make([]byte, 0, n)
	lr := io.LimitedReader{R: body, N: limit + 1}
	for {
		m, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// enforce reads the body (at most limit bytes: 413 beyond), refuses a body
// that is not JSON (415), and validates parameters, headers and body against
// the OpenAPI document (400 naming the field). Routes the document does not
// know pass through to the router's 404 and 405.
func (c *contract) enforce(limit int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route, params, err := c.router.FindRoute(r)
			if err != nil || c.admit(w, r, route, params, limit) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// admit checks r against route, whose path parameters are params. It
// answers the problem itself and returns false when r is refused; when it
// returns true, r.Body holds the bytes the client sent (openapi3filter's
// rewriting of the body, with the schema's defaults filled in, is undone).
func (c *contract) admit(w http.ResponseWriter, r *http.Request, route *routers.Route, params map[string]string, limit int64) bool {
	if h, n := repeatedHeader(r, route.Operation); h != "" {
		refuse(w, r, h, fmt.Sprintf("%d %s headers, want at most one", n, h))
		return false
	}
	body, ok := readRequestBody(w, r, route.Operation, limit)
	if !ok {
		return false
	}
	st := stateOf(r)
	if st == nil {
		st = &reqState{}
	}
	st.body.Reset(body)
	r.Body = http.NoBody // an empty body is no body to openapi3filter
	if len(body) > 0 {
		r.Body, r.GetBody = &st.body, st.reread
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: validationOptions}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		field, reason := describe(err, c.bounds)
		refuse(w, r, field, reason)
		return false
	}
	st.body.Reset(body)
	r.Body = &st.body
	return true
}

// readRequestBody reads the body of a request for op: at most limit bytes,
// and JSON. GET and DELETE take no body: one sent anyway is ignored, as RFC
// 9110 allows, not refused with a 413 or 415 that their contract does not
// list; it is never read. It answers the problem itself and returns false
// when the body is refused.
func readRequestBody(w http.ResponseWriter, r *http.Request, op *openapi3.Operation, limit int64) ([]byte, bool) {
	if op.RequestBody == nil || r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := readBody(r.Body, r.ContentLength, limit)
	if err != nil {
		reason := "could not be read"
		var slow *slowBodyError
		if errors.As(err, &slow) {
			reason = slow.Error() + "; the connection is closed"
		}
		refuse(w, r, "body", reason)
		return nil, false
	}
	if int64(len(body)) > limit {
		problem(w, r, http.StatusRequestEntityTooLarge, apiTooLarge, fmt.Sprintf("the body is over %d bytes", limit))
		return nil, false
	}
	if len(body) > 0 {
		if ct := r.Header.Get("Content-Type"); ct != api.MediaJSON {
			if mt, _, _ := mime.ParseMediaType(ct); mt != api.MediaJSON {
				problem(w, r, http.StatusUnsupportedMediaType, apiMediaType, "the body must be application/json")
				return nil, false
			}
		}
	}
	return body, true
}

// refuse answers 400 invalid-request naming field, with detail
// "field: reason".
func refuse(w http.ResponseWriter, r *http.Request, field, reason string) {
	p := newProblem(r, http.StatusBadRequest, apiInvalid, field+": "+reason)
	p.Field = field
	writeProblem(w, r, p, apiInvalid)
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
	switch {
	case re.Parameter != nil:
		field, reason = re.Parameter.Name, paramReason(err, re.Parameter.Name)
	case errors.As(err, &se):
		field, reason = bodyFieldReason(se, bounds)
	default:
		field, reason = "body", "is not valid JSON for this operation"
	}
	if reason == "" {
		reason = "is invalid"
	}
	return field, reason
}

// paramReason says what is wrong with the parameter named name, of which
// err is the validation error.
func paramReason(err error, name string) string {
	var se *openapi3.SchemaError
	switch {
	case errors.As(err, &se):
		if se.SchemaField == "pattern" {
			if why, ok := patternReason(name, se.Value); ok {
				return why
			}
		}
		return se.Reason
	case errors.Is(err, openapi3filter.ErrInvalidRequired):
		return "is required"
	}
	return "is malformed"
}

// bodyFieldReason names the body's field at fault in se and says what is
// wrong with it: a number outside the range of a field the server bounds
// is described by bounds.
func bodyFieldReason(se *openapi3.SchemaError, bounds func(string) (string, bool)) (field, reason string) {
	field, reason = strings.Join(se.JSONPointer(), "."), se.Reason
	if (se.SchemaField == "minimum" || se.SchemaField == "maximum") && bounds != nil {
		if b, ok := bounds(field); ok {
			reason = b
		}
	}
	if m := unknownProperty.FindStringSubmatch(se.Reason); field == "" && m != nil {
		return m[1], "is not a known field"
	}
	if field == "" {
		field = "body"
	}
	return field, reason
}
