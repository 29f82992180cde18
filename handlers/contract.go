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
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/lockgate/lockgate/api"
)

// contract enforces openapi.yaml on requests.
type contract struct {
	router routers.Router
	// ops has, for each operation of the document, what is checked of its
	// requests (see newOperation).
	ops map[*openapi3.Operation]*operation
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
	c := &contract{router: newRouteFinder(doc, router), ops: map[*openapi3.Operation]*operation{}}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			c.ops[op] = newOperation(doc, item, op)
		}
	}
	return c, nil
}

// operation is what openapi3filter.ValidateRequest checks of a request for
// one operation, in its order, worked out once from the document: the
// parameters of the path and of the operation (the operation's overriding
// the path's), then the body.
//
// Two checks that cannot fail are left out:
//   - the security requirements, when one of them names only declared
//     schemes: openapi3filter.NoopAuthenticationFunc accepts every scheme,
//     so such a requirement is always met (else full is set and
//     openapi3filter.ValidateRequest does it all);
//   - an optional parameter without a default that the request does not
//     have (see param.absent): openapi3filter passes it without looking
//     further.
type operation struct {
	full   bool
	params []param
	body   *openapi3.RequestBody
	passed passed // bodies that passed the body check
}

// passed remembers request bodies that passed one operation's body check, so
// that the same bytes sent again are not decoded and checked again: what
// openapi3filter.ValidateRequestBody answers depends only on the operation's
// request body, the request's Content-Type, the options (validationOptions,
// the same for every request), the bytes, and what is fixed for the process
// (the document, kin-openapi's settings). It is used only for bodies sent as
// exactly application/json and of at most maxPassedLen bytes, holds at most
// maxPassed of them and, when full, starts again empty. A body that failed
// is never remembered: its problem is worked out each time. A skipped check
// also skips openapi3filter's rewriting of the request's body (defaults
// filled in), which enforce undoes anyway: the handler reads the bytes sent.
//
// Clients send the same few bodies again and again ({"ttl_ms":30000}); a
// body check decodes the JSON into a generic value and walks the schema.
// The figures behind keeping it are in docs/design.md ("The contract check
// remembers what passed").
//
// It remembers a path parameter's values the same way (a resource's name,
// still escaped as the route finder hands it on): what
// openapi3filter.ValidateParameter answers of a path parameter depends only
// on the parameter and that value. That took the same benchmark on from 96
// to 86 allocations and its CPU per operation down by another 4 % (median
// of 8 alternations).
//
// A request whose body or name is not remembered pays for the check as
// before, plus a write lock to remember it; when clients send many
// different names or owners, the memory keeps starting again and most
// requests pay that.
type passed struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

const (
	// maxPassedLen bounds the bodies and values passed remembers: a body
	// with both numbers and an owner label of up to about 200 bytes fits,
	// and so does every resource name the contract allows (at most 200).
	maxPassedLen = 256
	// maxPassed bounds how many it remembers per operation or parameter:
	// at most maxPassed × maxPassedLen bytes of keys (256 KB).
	maxPassed = 1024
)

// hasValue reports whether v is remembered.
func (p *passed) hasValue(v string) bool {
	p.mu.RLock()
	_, ok := p.m[v]
	p.mu.RUnlock()
	return ok
}

// addValue remembers v, unless it is longer than maxPassedLen; when full,
// passed starts again empty.
func (p *passed) addValue(v string) {
	if len(v) > maxPassedLen {
		return
	}
	p.mu.Lock()
	if p.m == nil || len(p.m) >= maxPassed {
		p.m = make(map[string]struct{}, 64)
	}
	p.m[v] = struct{}{}
	p.mu.Unlock()
}

// has reports whether body is remembered.
func (p *passed) has(body []byte) bool {
	p.mu.RLock()
	_, ok := p.m[string(body)] // no copy for the look-up
	p.mu.RUnlock()
	return ok
}

// add remembers body, unless it is longer than maxPassedLen.
func (p *passed) add(body []byte) { p.addValue(string(body)) }

// len is how many bodies or values are remembered (tests).
func (p *passed) len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.m)
}

// param is one parameter an operation checks.
type param struct {
	p *openapi3.Parameter
	// header is a header parameter's name in canonical form, the key
	// openapi3filter looks up.
	header string
	// skipAbsent: absent, the parameter passes (see absent).
	skipAbsent bool
	// passed, for a path parameter, remembers the values that passed (see
	// passed); nil for the others: a header's values (lease ids, tokens)
	// rarely repeat, and a lease id is a secret not to be kept.
	passed *passed
}

// newOperation works out what is checked of op's requests (see operation).
func newOperation(doc *openapi3.T, item *openapi3.PathItem, op *openapi3.Operation) *operation {
	o := &operation{}
	if op.RequestBody != nil {
		o.body = op.RequestBody.Value
	}
	security := op.Security
	if security == nil {
		security = &doc.Security
	}
	o.full = !alwaysMet(doc, *security)
	for _, ref := range item.Parameters {
		if op.Parameters != nil && op.Parameters.GetByInAndName(ref.Value.In, ref.Value.Name) != nil {
			continue
		}
		o.params = append(o.params, newParam(ref.Value))
	}
	for _, ref := range op.Parameters {
		o.params = append(o.params, newParam(ref.Value))
	}
	return o
}

// alwaysMet reports whether openapi3filter.ValidateSecurityRequirements
// passes every request when authentication is
// openapi3filter.NoopAuthenticationFunc: there are no requirements, or one
// of them names only schemes the document declares.
func alwaysMet(doc *openapi3.T, reqs openapi3.SecurityRequirements) bool {
	if len(reqs) == 0 {
		return true
	}
	for _, req := range reqs {
		declared := true
		for name := range req {
			if doc.Components == nil || doc.Components.SecuritySchemes[name] == nil ||
				doc.Components.SecuritySchemes[name].Value == nil {
				declared = false
			}
		}
		if declared {
			return true
		}
	}
	return false
}

// newParam returns p as checked, with skipAbsent set when openapi3filter
// passes it whenever the request lacks it (see absent).
func newParam(p *openapi3.Parameter) param {
	pp := param{p: p}
	switch p.In {
	case openapi3.ParameterInHeader:
		pp.header = http.CanonicalHeaderKey(p.Name)
	case openapi3.ParameterInPath:
		pp.passed = &passed{}
	}
	if p.Required || p.Content != nil || p.Schema == nil || p.Schema.Value == nil {
		return pp
	}
	sc := p.Schema.Value
	if sc.Default != nil || len(sc.AllOf) > 0 || len(sc.AnyOf) > 0 || len(sc.OneOf) > 0 || sc.Not != nil {
		return pp
	}
	sm, err := p.SerializationMethod()
	if err != nil {
		return pp
	}
	switch p.In {
	case openapi3.ParameterInQuery:
		pp.skipAbsent = true
	case openapi3.ParameterInHeader:
		primitive := sc.Type == nil || !(sc.Type.Is(openapi3.TypeArray) || sc.Type.Is(openapi3.TypeObject))
		pp.skipAbsent = sm.Style == openapi3.SerializationSimple && primitive
	}
	return pp
}

// absent reports whether the request lacks p in a way that openapi3filter
// passes without looking further: p is optional, without a default or
// composed schema, and a header parameter whose (canonical) key is not in
// the header, or a query parameter of a request without a query (it then
// stops at the empty query). A header present with no value is not absent
// (openapi3filter refuses it as empty).
func (p *param) absent(r *http.Request) bool {
	if !p.skipAbsent {
		return false
	}
	switch p.p.In {
	case openapi3.ParameterInHeader:
		_, ok := r.Header[p.header]
		return !ok
	case openapi3.ParameterInQuery:
		return r.URL.RawQuery == ""
	}
	return false
}

// validate checks r, whose body is body, against its route as
// openapi3filter.ValidateRequest does, and returns the same error.
func (c *contract) validate(r *http.Request, route *routers.Route, params map[string]string, body []byte) error {
	var in *openapi3filter.RequestValidationInput
	if st := stateOf(r); st != nil {
		in = &st.in
	} else {
		in = new(openapi3filter.RequestValidationInput)
	}
	*in = openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: validationOptions}
	op := c.ops[route.Operation]
	if op == nil || op.full {
		return openapi3filter.ValidateRequest(r.Context(), in)
	}
	for i := range op.params {
		p := &op.params[i]
		if p.absent(r) {
			continue
		}
		v, memo := params[p.p.Name]
		memo = memo && p.passed != nil
		if memo && p.passed.hasValue(v) {
			continue
		}
		if err := openapi3filter.ValidateParameter(r.Context(), in, p.p); err != nil {
			return err
		}
		if memo {
			p.passed.addValue(v)
		}
	}
	if op.body == nil {
		return nil
	}
	memo := len(body) > 0 && len(body) <= maxPassedLen && r.Header.Get("Content-Type") == api.MediaJSON
	if memo && op.passed.has(body) {
		return nil
	}
	err := openapi3filter.ValidateRequestBody(r.Context(), in, op.body)
	if err == nil && memo {
		op.passed.add(body)
	}
	return err
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
			if err != nil {
				next.ServeHTTP(w, r)
				return
			}
			if h, n := repeatedHeader(r, route.Operation); h != "" {
				p := newProblem(r, http.StatusBadRequest, apiInvalid, fmt.Sprintf("%s: %d %s headers, want at most one", h, n, h))
				p.Field = h
				writeProblem(w, r, p, apiInvalid)
				return
			}
			st := stateOf(r)
			if st == nil {
				st = &reqState{}
			}
			// GET and DELETE take no body. One sent anyway is ignored, as
			// RFC 9110 allows, not refused with a 413 or 415 that their
			// contract does not list; it is never read.
			var body []byte
			if route.Operation.RequestBody != nil && r.Body != nil && r.Body != http.NoBody {
				body, err = readBody(r.Body, r.ContentLength, limit)
			}
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
				if ct := r.Header.Get("Content-Type"); ct != api.MediaJSON {
					if mt, _, _ := mime.ParseMediaType(ct); mt != api.MediaJSON {
						problem(w, r, http.StatusUnsupportedMediaType, apiMediaType, "the body must be application/json")
						return
					}
				}
			}
			st.body.Reset(body)
			r.Body = http.NoBody // an empty body is no body to openapi3filter
			if len(body) > 0 {
				r.Body, r.GetBody = &st.body, st.reread
			}
			err = c.validate(r, route, params, body)
			// The variables were for the validation only (the router finds
			// them again for the handler): their map goes back to the pool.
			st.in.PathParams = nil
			if params != nil {
				clear(params)
				varsPool.Put(params)
			}
			if err != nil {
				field, reason := describe(err, c.bounds)
				p := newProblem(r, http.StatusBadRequest, apiInvalid, field+": "+reason)
				p.Field = field
				writeProblem(w, r, p, apiInvalid)
				return
			}
			st.body.Reset(body)
			r.Body = &st.body
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
			if se.SchemaField == "pattern" {
				if why, ok := patternReason(field, se.Value); ok {
					reason = why
				}
			}
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

// routeFinder finds a request's route as the gorillamux router does, with
// its errors, but without allocating a route per request or trying each
// path's regular expression in turn. It does so for documents whose every
// path template it matches exactly (see newTemplate) and that have no
// server other than "/"; for others it asks the gorillamux router.
type routeFinder struct {
	mux       routers.Router
	templates []*template // nil: ask mux
}

// template is a path of the document, matched as gorilla/mux matches the
// regular expression it makes of it: the request's escaped path, split at
// its slashes, has as many segments as the template, each literal segment
// equal and each variable's ("{name}", mux's [^/]+) not empty. A
// variable's value is its segment, still escaped (mux's UseEncodedPath).
type template struct {
	segs   []string // the literal segments; "" for a variable
	names  []string // the variables' names; "" for a literal segment
	nvars  int
	proto  routers.Route             // the route but for Method and Operation
	routes map[string]*routers.Route // by method, made once
}

func newRouteFinder(doc *openapi3.T, mux routers.Router) *routeFinder {
	f := &routeFinder{mux: mux}
	if len(doc.Servers) > 1 || (len(doc.Servers) == 1 && doc.Servers[0].URL != "/" && doc.Servers[0].URL != "") {
		return f
	}
	var server *openapi3.Server
	if len(doc.Servers) == 1 {
		server = doc.Servers[0]
	}
	var templates []*template
	// The order gorillamux tries them in; the first that matches wins.
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		t := newTemplate(path)
		if t == nil || len(item.Servers) > 0 {
			return f
		}
		t.proto = routers.Route{Spec: doc, Server: server, Path: path, PathItem: item}
		for method, op := range item.Operations() {
			r := t.proto
			r.Method, r.Operation = method, op
			t.routes[method] = &r
		}
		templates = append(templates, t)
	}
	f.templates = templates
	return f
}

// newTemplate returns path as a template, or nil if it has a segment that
// is neither literal nor a whole variable without a pattern: gorilla/mux
// matches those in ways newTemplate does not copy.
func newTemplate(path string) *template {
	if !strings.HasPrefix(path, "/") {
		return nil
	}
	t := &template{routes: map[string]*routers.Route{}}
	for seg := range strings.SplitSeq(path, "/") {
		name := ""
		if strings.ContainsAny(seg, "{}") {
			inner, open := strings.CutPrefix(seg, "{")
			inner, closed := strings.CutSuffix(inner, "}")
			if !open || !closed || inner == "" || strings.ContainsAny(inner, "{}:") {
				return nil
			}
			name, seg = inner, ""
			t.nvars++
		}
		t.segs = append(t.segs, seg)
		t.names = append(t.names, name)
	}
	return t
}

// match reports whether path matches t.
func (t *template) match(path string) bool {
	rest := path
	for i, want := range t.segs {
		seg, after, more := strings.Cut(rest, "/")
		if more != (i < len(t.segs)-1) {
			return false
		}
		if t.names[i] != "" {
			if seg == "" {
				return false
			}
		} else if seg != want {
			return false
		}
		rest = after
	}
	return true
}

// varsPool keeps path-variable maps between requests (see
// contract.enforce, which gives them back).
var varsPool = sync.Pool{New: func() any { return map[string]string{} }}

// vars returns the variables of a path t matches, in a map from varsPool.
func (t *template) vars(path string) map[string]string {
	vars := varsPool.Get().(map[string]string)
	rest := path
	for i := range t.segs {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		if t.names[i] != "" {
			vars[t.names[i]] = seg
		}
	}
	return vars
}

// FindRoute implements routers.Router as the gorillamux router does. The
// route it returns is shared: it must not be changed.
func (f *routeFinder) FindRoute(req *http.Request) (*routers.Route, map[string]string, error) {
	if f.templates == nil {
		return f.mux.FindRoute(req)
	}
	path := req.URL.EscapedPath()
	for _, t := range f.templates {
		if !t.match(path) {
			continue
		}
		route := t.routes[req.Method]
		if route == nil {
			// Not one of the methods PathItem.Operations lists: as
			// gorillamux does.
			r := t.proto
			r.Method, r.Operation = req.Method, t.proto.PathItem.GetOperation(req.Method)
			if r.Operation == nil {
				return nil, nil, routers.ErrMethodNotAllowed
			}
			route = &r
		}
		return route, t.vars(path), nil
	}
	return nil, nil, routers.ErrPathNotFound
}
