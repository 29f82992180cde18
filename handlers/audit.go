package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/rs/zerolog/hlog"
)

// auditInfo carries what the audit line needs from the handler.
type auditInfo struct{ token int64 }

const auditInfoKey ctxKey = 1

// setToken records the fencing token a state-changing request produced or
// broke, for the audit line.
func setToken(r *http.Request, token int64) {
	if a, ok := r.Context().Value(auditInfoKey).(*auditInfo); ok {
		a.token = token
	}
}

// auditOp names the state-changing operation of a request, or "".
func auditOp(r *http.Request) string {
	res, ok := strings.CutPrefix(r.URL.Path, "/locks/")
	if !ok || res == "" {
		return ""
	}
	switch r.Method {
	case http.MethodPut:
		return "acquire"
	case http.MethodPatch:
		return "extend"
	case http.MethodDelete:
		if r.URL.Query().Has("force") {
			return "force"
		}
		return "release"
	}
	return ""
}

// caller names who made the request: Options.Caller's answer (the bearer
// token's name), else the client certificate's subject, else "anonymous".
// Never the token itself.
func (s *server) caller(r *http.Request) string {
	if s.opt.Caller != nil {
		if name := s.opt.Caller(r); name != "" {
			return name
		}
	}
	if subject := certSubject(r); subject != "" {
		return subject
	}
	return "anonymous"
}

func certSubject(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	return r.TLS.PeerCertificates[0].Subject.String()
}

// audit logs one line per state-changing request (acquire, extend, release,
// force), refused ones included: "audit": true, the operation, the caller,
// the resource, the outcome, the status and, when there is one, the fencing
// token. It never logs headers or bodies, so neither bearer tokens nor lease
// ids reach it.
func (s *server) audit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := auditOp(r)
		if op == "" {
			next.ServeHTTP(w, r)
			return
		}
		a := &auditInfo{}
		r = r.WithContext(context.WithValue(r.Context(), auditInfoKey, a))
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		outcome := ""
		if info, ok := r.Context().Value(requestInfoKey).(*requestInfo); ok {
			outcome = info.outcome
		}
		if outcome == "" {
			// Written by a Middleware (access control, rate limit), which
			// records no outcome.
			switch status {
			case http.StatusUnauthorized:
				outcome = "unauthorized"
			case http.StatusForbidden:
				outcome = "forbidden"
			case http.StatusTooManyRequests:
				outcome = "rate_limited"
			default:
				outcome = strconv.Itoa(status)
			}
		}
		ev := hlog.FromRequest(r).Info().Bool("audit", true).Str("op", op).Str("caller", s.caller(r)).
			Str("resource", strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/locks/"), "/")).
			Str("outcome", outcome).Int("status", status)
		if subject := certSubject(r); subject != "" {
			ev = ev.Str("client_cert", subject)
		}
		if a.token > 0 {
			ev = ev.Int64("fencing_token", a.token)
		}
		ev.Msg("audit")
	})
}
