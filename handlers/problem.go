package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog/hlog"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
)

// problemKind is a problem type with its title and log outcome.
type problemKind struct {
	typ, title, outcome string
}

var (
	apiInvalid          = problemKind{api.ProblemInvalid, "Invalid request", "bad_request"}
	apiTooLarge         = problemKind{api.ProblemTooLarge, "Request body too large", "bad_request"}
	apiMediaType        = problemKind{api.ProblemMediaType, "Unsupported media type", "bad_request"}
	apiTaken            = problemKind{api.ProblemTaken, "Lock held by another lease", "taken"}
	apiHeldByOther      = problemKind{api.ProblemHeldByOther, "Lock held by another lease, not by this one", "held_by_other"}
	apiNotHeld          = problemKind{api.ProblemNotHeld, "Lock not held", "not_held"}
	apiTokenMismatch    = problemKind{api.ProblemTokenMismatch, "Fencing token does not match", "token_mismatch"}
	apiNoQuorum         = problemKind{api.ProblemNoQuorum, "No quorum of lock nodes", "no_quorum"}
	apiTooManyWaiters   = problemKind{api.ProblemTooManyWaiters, "Too many waiters", "too_many_waiters"}
	apiShuttingDown     = problemKind{api.ProblemShuttingDown, "Shutting down", "shutting_down"}
	apiNotFound         = problemKind{api.ProblemNotFound, "Not found", "not_found"}
	apiMethodNotAllowed = problemKind{api.ProblemMethodNotAllowed, "Method not allowed", "bad_request"}
	apiInternal         = problemKind{api.ProblemInternal, "Internal error", "internal"}
)

// statusClientClosedRequest is logged when the client left before the
// answer (nginx's 499); the client never sees it.
const statusClientClosedRequest = 499

// fail is the one place that maps lockcore errors to HTTP problems.
func fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		invalid *lockcore.InvalidError
		taken   *lockcore.TakenError
		other   *lockcore.HeldByOtherError
		quorum  *lockcore.QuorumError
	)
	switch {
	case errors.As(err, &invalid):
		p := newProblem(r, http.StatusBadRequest, apiInvalid, invalid.Field+": "+invalid.Reason)
		p.Field = invalid.Field
		writeProblem(w, r, p, apiInvalid)
	case errors.As(err, &taken):
		conflict(w, r, apiTaken, "another lease holds "+taken.Resource, taken.RetryAfter)
	case errors.As(err, &other):
		conflict(w, r, apiHeldByOther, "this lease no longer holds "+other.Resource+"; another lease does", other.RetryAfter)
	case errors.Is(err, lockcore.ErrNotHeld):
		problem(w, r, http.StatusNotFound, apiNotHeld, "nothing holds "+resourceParam(r))
	case errors.Is(err, lockcore.ErrTokenMismatch):
		problem(w, r, http.StatusPreconditionFailed, apiTokenMismatch, "If-Match is not the current holder's fencing token")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		setOutcome(r, "client_gone")
		w.WriteHeader(statusClientClosedRequest)
	case errors.As(err, &quorum):
		// The per-node causes name the nodes: they go to the log for the
		// operator, not to the client (nor to /readyz, which anyone may ask).
		causes := make([]string, len(quorum.Causes))
		for i, c := range quorum.Causes {
			causes[i] = c.Error()
		}
		hlog.FromRequest(r).Warn().Str("op", quorum.Op).Int("answered", quorum.Answered).
			Int("needed", quorum.Needed).Strs("causes", causes).Msg("no quorum of lock nodes")
		w.Header().Set(api.HeaderRetryAfter, "1")
		problem(w, r, http.StatusServiceUnavailable, apiNoQuorum,
			strconv.Itoa(quorum.Answered)+" of the "+lockNodes(quorum.Needed)+" needed answered; try again")
	case errors.Is(err, lockcore.ErrTooManyWaiters):
		w.Header().Set(api.HeaderRetryAfter, "1")
		problem(w, r, http.StatusTooManyRequests, apiTooManyWaiters, "this replica has its maximum number of waiters; try again")
	case errors.Is(err, lockcore.ErrClosed):
		w.Header().Set(api.HeaderRetryAfter, "1")
		problem(w, r, http.StatusServiceUnavailable, apiShuttingDown, "the gateway is shutting down; try another replica or again")
	default:
		hlog.FromRequest(r).Error().Err(err).Msg("unexpected error")
		problem(w, r, http.StatusInternalServerError, apiInternal, "unexpected error")
	}
}

// conflict answers 409 with the holder's remaining TTL in retry_after_ms and
// in Retry-After (whole seconds, rounded up).
func conflict(w http.ResponseWriter, r *http.Request, kind problemKind, detail string, retry time.Duration) {
	retry = max(retry, 0)
	ms := retry.Milliseconds()
	w.Header().Set(api.HeaderRetryAfter, strconv.FormatInt((ms+999)/1000, 10))
	p := newProblem(r, http.StatusConflict, kind, detail)
	p.RetryAfterMs = &ms
	writeProblem(w, r, p, kind)
}

func newProblem(r *http.Request, status int, kind problemKind, detail string) *api.Problem {
	return &api.Problem{Type: kind.typ, Title: kind.title, Status: status, Detail: detail, Instance: r.URL.Path}
}

func problem(w http.ResponseWriter, r *http.Request, status int, kind problemKind, detail string) {
	writeProblem(w, r, newProblem(r, status, kind, detail), kind)
}

func writeProblem(w http.ResponseWriter, r *http.Request, p *api.Problem, kind problemKind) {
	setOutcome(r, kind.outcome)
	w.Header().Set("Content-Type", api.MediaProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.MediaJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// lockNodes says "1 lock node" or "n lock nodes".
func lockNodes(n int) string {
	if n == 1 {
		return "1 lock node"
	}
	return strconv.Itoa(n) + " lock nodes"
}
