package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Header names of the fencing HTTP convention.
const (
	// TokenHeader carries the writer's fencing token as a decimal integer.
	TokenHeader = "Fencing-Token"
	// ResourceHeader names the locked resource whose fence the token is
	// checked against, when that is not implied by the URL.
	ResourceHeader = "Fencing-Resource"
)

// Problem type URIs of the RFC 9457 bodies written by WriteError. Each points
// at the section of docs/fencing.md that explains it.
const (
	// ProblemStaleToken is the type of the 409 for a *StaleTokenError.
	ProblemStaleToken = "urn:lockgate:problem:stale-fencing-token"
	// ProblemInvalidToken is the type of the 400 for ErrInvalidToken.
	ProblemInvalidToken = "urn:lockgate:problem:invalid-fencing-token"
	// ProblemMissingToken is the type of the 400 for ErrMissingToken.
	ProblemMissingToken = "urn:lockgate:problem:missing-fencing-token"
	// ProblemInvalidResource is the type of the 400 for ErrInvalidResource.
	ProblemInvalidResource = "urn:lockgate:problem:invalid-fencing-resource"
	// ProblemInvalidKey is the type of the 400 for ErrInvalidKey.
	ProblemInvalidKey = "urn:lockgate:problem:invalid-key"
)

type ctxKey int

const (
	tokenKey ctxKey = iota
	resourceKey
)

// TokenFromContext returns the fencing token that Middleware parsed (and, if
// it was given a Guard, admitted) for the request whose context is ctx. The
// boolean is false if Middleware did not handle the request.
func TokenFromContext(ctx context.Context) (uint64, bool) {
	tok, ok := ctx.Value(tokenKey).(uint64)
	return tok, ok
}

// ResourceFromContext returns the resource name Middleware checked the token
// against. The boolean is false if Middleware did not handle the request.
func ResourceFromContext(ctx context.Context) (string, bool) {
	res, ok := ctx.Value(resourceKey).(string)
	return res, ok
}

// MiddlewareOptions configure Middleware. A nil *MiddlewareOptions and the
// zero value both mean: resource from the Fencing-Resource header, no Guard.
type MiddlewareOptions struct {
	// Resource names the fenced resource of a request, for example from a
	// path parameter. Nil means the Fencing-Resource header. An empty result
	// is answered with 400.
	Resource func(*http.Request) string
	// Guard, if set, admits the token before the handler runs and answers a
	// stale token with 409 without calling the handler. Nil means the
	// middleware only parses and validates, and the handler is expected to
	// do the fenced write itself (Put) and report a stale token with
	// WriteError.
	//
	// Admitting in the middleware is an early, cheap refusal, not the
	// fence: the Admit and the handler's later write are two steps, and a
	// newer holder can be admitted and write between them. Only a handler
	// that writes through an atomic check-and-write (Put, or a database
	// transaction that ran the Admit) is safe.
	Guard Guard
}

// Middleware returns net/http middleware for a storage service's write
// routes. For each request it reads the Fencing-Token header and the
// resource (see MiddlewareOptions.Resource) and:
//
//   - answers 400 with an application/problem+json body if the token is
//     missing, repeated, malformed or outside 1..MaxToken, or the resource is
//     missing or invalid;
//   - if opts.Guard is set, admits the token and answers 409 (with the
//     highest admitted token in the "highest_token" member) if it is stale,
//     or 500 if the guard fails;
//   - otherwise calls the next handler with the token and the resource in
//     the request context (TokenFromContext, ResourceFromContext).
//
// Put the middleware only on routes that write: reads need no token.
func Middleware(opts *MiddlewareOptions) func(http.Handler) http.Handler {
	var o MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	fromHeader := o.Resource == nil
	if fromHeader {
		o.Resource = func(r *http.Request) string { return r.Header.Get(ResourceHeader) }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, err := tokenFromHeader(r.Header)
			if err != nil {
				WriteError(w, err)
				return
			}
			resource := o.Resource(r)
			if resource == "" && fromHeader {
				WriteError(w, fmt.Errorf("%w: the request names no resource; send a %s header",
					ErrInvalidResource, ResourceHeader))
				return
			}
			if err := CheckResource(resource); err != nil {
				WriteError(w, err)
				return
			}
			if o.Guard != nil {
				if err := o.Guard.Admit(r.Context(), resource, token); err != nil {
					WriteError(w, err)
					return
				}
			}
			ctx := context.WithValue(r.Context(), tokenKey, token)
			ctx = context.WithValue(ctx, resourceKey, resource)
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

func tokenFromHeader(h http.Header) (uint64, error) {
	vals := h.Values(TokenHeader)
	switch len(vals) {
	case 0:
		return 0, ErrMissingToken
	case 1:
		return ParseToken(vals[0])
	default:
		return 0, fmt.Errorf("%w: %d %s headers, want exactly one", ErrInvalidToken, len(vals), TokenHeader)
	}
}

// problem is an RFC 9457 problem details object with the extension members
// that fencing problems use.
type problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail,omitempty"`
	Resource     string `json:"resource,omitempty"`
	Token        uint64 `json:"token,omitempty"`
	HighestToken uint64 `json:"highest_token,omitempty"`
}

// WriteError answers an error from this package as an RFC 9457
// application/problem+json response, so that every storage service reports
// fencing failures alike:
//
//   - a *StaleTokenError becomes 409 Conflict with the extension members
//     "resource", "token" and "highest_token";
//   - ErrMissingToken, ErrInvalidToken, ErrInvalidResource and ErrInvalidKey
//     become 400 Bad Request with the error text as detail;
//   - anything else becomes 500 Internal Server Error without detail, so
//     that storage errors are not leaked; log them before calling WriteError.
func WriteError(w http.ResponseWriter, err error) {
	var p problem
	var stale *StaleTokenError
	switch {
	case errors.As(err, &stale):
		p = problem{
			Type:   ProblemStaleToken,
			Title:  "Stale fencing token",
			Status: http.StatusConflict,
			Detail: fmt.Sprintf("token %d for resource %q is lower than token %d, which was already admitted; "+
				"the lock has passed to a newer holder", stale.Token, stale.Resource, stale.Highest),
			Resource:     stale.Resource,
			Token:        stale.Token,
			HighestToken: stale.Highest,
		}
	case errors.Is(err, ErrMissingToken):
		p = problem{Type: ProblemMissingToken, Title: "Missing fencing token", Status: http.StatusBadRequest,
			Detail: "writes need a " + TokenHeader + " header with the token of the lock grant"}
	case errors.Is(err, ErrInvalidToken):
		p = problem{Type: ProblemInvalidToken, Title: "Invalid fencing token", Status: http.StatusBadRequest,
			Detail: err.Error()}
	case errors.Is(err, ErrInvalidResource):
		p = problem{Type: ProblemInvalidResource, Title: "Invalid fencing resource", Status: http.StatusBadRequest,
			Detail: err.Error()}
	case errors.Is(err, ErrInvalidKey):
		p = problem{Type: ProblemInvalidKey, Title: "Invalid key", Status: http.StatusBadRequest,
			Detail: err.Error()}
	default:
		p = problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError),
			Status: http.StatusInternalServerError}
	}
	body, _ := json.Marshal(p) // cannot fail: strings and integers only
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
