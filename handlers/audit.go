package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// setToken records the fencing token a state-changing request produced or
// broke, for the audit line.
func setToken(r *http.Request, token int64) {
	if st := stateOf(r); st != nil {
		st.token = token
	}
}

// setPermit records the permit a semaphore request acted on, for the
// audit line.
func setPermit(r *http.Request, i int) {
	if st := stateOf(r); st != nil {
		st.permit = i + 1
	}
}

// auditOp names the state-changing operation of a request, or "".
func auditOp(r *http.Request) string {
	if rest, ok := strings.CutPrefix(r.URL.Path, semaphorePrefix); ok {
		return semaphoreAuditOp(r.Method, rest)
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, rwPrefix); ok {
		return rwAuditOp(r.Method, rest)
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, setPrefix); ok {
		return setAuditOp(r.Method, rest)
	}
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
		if r.URL.RawQuery != "" && r.URL.Query().Has("force") {
			return "force"
		}
		return "release"
	}
	return ""
}

// caller names who made the request: Options.Caller's answer (the bearer
// token's name), else the client certificate's subject, else "anonymous".
// Never the token itself.
func (s *server) caller(r *http.Request) string { return s.callerOr(r, certSubject(r)) }

// callerOr is caller with the client certificate's subject already known.
func (s *server) callerOr(r *http.Request, subject string) string {
	if s.opt.Caller != nil {
		if name := s.opt.Caller(r); name != "" {
			return name
		}
	}
	if subject != "" {
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
		next.ServeHTTP(w, r)
		st := stateOf(r)
		if op == "" || st == nil {
			return
		}
		status := st.w.answered()
		outcome := auditOutcome(status, st.outcome)
		ev := logEvent(r, zerolog.InfoLevel)
		if ev == nil {
			return
		}
		subject := certSubject(r)
		ev = ev.Bool("audit", true).Str("op", op).Str("caller", s.callerOr(r, subject)).
			Str("resource", auditResource(r.URL.Path)).
			Str("outcome", outcome).Int("status", status)
		if subject != "" {
			ev = ev.Str("client_cert", subject)
		}
		if st.permit > 0 {
			ev = ev.Int("permit", st.permit-1)
		}
		if st.token > 0 {
			ev = ev.Int64("fencing_token", st.token)
		}
		ev.Msg("audit")
	})
}

// auditOutcome is the outcome of an audit line: the one the handler
// recorded, or, for an answer written by a Middleware (access control,
// rate limit), which records none, one named after its status.
func auditOutcome(status int, outcome string) string {
	if outcome != "" {
		return outcome
	}
	switch status {
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusTooManyRequests:
		return "rate_limited"
	}
	return strconv.Itoa(status)
}

// auditResource is the resource an audited path names: a lock's, a
// readers-writer lock's, a semaphore's (its permit is not part of it), or
// a lock set's members as the path lists them ("a,b,c").
func auditResource(path string) string {
	if rest, ok := strings.CutPrefix(path, rwPrefix); ok {
		return rest
	}
	if rest, ok := strings.CutPrefix(path, setPrefix); ok {
		return rest
	}
	if rest, ok := strings.CutPrefix(path, semaphorePrefix); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	return strings.TrimSuffix(strings.TrimPrefix(path, "/locks/"), "/")
}
