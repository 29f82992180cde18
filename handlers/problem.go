package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

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
		noQuorum(w, r, quorum)
	case errors.Is(err, lockcore.ErrTooManyWaiters):
		tooManyWaiters(w, r, limitReplica, "this replica has its maximum number of waiters, all callers "+
			"together (-max-waiters); try again")
	case errors.Is(err, lockcore.ErrClosed):
		w.Header().Set(api.HeaderRetryAfter, "1")
		problem(w, r, http.StatusServiceUnavailable, apiShuttingDown, "the gateway is shutting down; try another replica or again")
	default:
		logEvent(r, zerolog.ErrorLevel).Err(err).Msg("unexpected error")
		problem(w, r, http.StatusInternalServerError, apiInternal, "unexpected error")
	}
}

// noQuorum logs a *lockcore.QuorumError for the operator and answers it
// (see answerNoQuorum).
func noQuorum(w http.ResponseWriter, r *http.Request, quorum *lockcore.QuorumError) {
	// The per-node causes name the nodes: they go to the log for the
	// operator, not to the client (nor to /readyz, which anyone may ask).
	causes := make([]string, len(quorum.Causes))
	for i, c := range quorum.Causes {
		causes[i] = c.Error()
	}
	logEvent(r, zerolog.WarnLevel).Str("op", quorum.Op).Int("answered", quorum.Answered).
		Int("needed", quorum.Needed).Strs("causes", causes).Msg("no quorum of lock nodes")
	answerNoQuorum(w, r, quorum, nil)
}

// answerNoQuorum answers 503 for a *lockcore.QuorumError, with Retry-After
// (and retry_after_ms) from when the gateway expects a quorum back (at
// least a second), and nodes if given (see api.Problem.Nodes). It logs
// nothing: /readyz, probed every few seconds, answers with it, and the
// node states it reports are logged once each, when they change.
func answerNoQuorum(w http.ResponseWriter, r *http.Request, quorum *lockcore.QuorumError, nodes []api.NodeState) {
	ms := max(quorum.RetryAfter.Milliseconds(), 1000)
	w.Header().Set(api.HeaderRetryAfter, strconv.FormatInt((ms+999)/1000, 10))
	var reports []lockcore.NodeReport
	if st := stateOf(r); st != nil && st.nodes != nil {
		reports = st.nodes.NodeReports()
	}
	p := newProblem(r, http.StatusServiceUnavailable, apiNoQuorum, noQuorumDetail(quorum, reports, time.Duration(ms)*time.Millisecond))
	p.RetryAfterMs, p.Nodes = &ms, nodes
	writeProblem(w, r, p, apiNoQuorum)
}

// noQuorumDetail is a no-quorum answer's detail: how many nodes answered
// and, from reports (the node guard's last findings, in the order of the
// nodes), which nodes are out of service, why and until when. A node out of
// service (found restarted or without its data, quarantined, being
// recovered, not yet initialized) is not a passing failure: the detail
// then says when a quorum is expected back (retry, the Retry-After header)
// and that retrying sooner fails the same way. Nodes are named by their
// place in the gateway's list, never by address; reasons are those /readyz
// gives. Otherwise (nodes slow or unreachable) the failure is transient:
// "try again".
func noQuorumDetail(quorum *lockcore.QuorumError, reports []lockcore.NodeReport, retry time.Duration) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(quorum.Answered) + " of the " + lockNodes(quorum.Needed) + " needed answered")
	out := 0
	for i, rp := range reports {
		var what string
		switch rp.State {
		case lockcore.NodeLost:
			what = "found restarted or without data it had acknowledged, being recovered"
		case lockcore.NodeQuarantined:
			what = "quarantined after a restart or a loss of data"
		case lockcore.NodeUninitialized:
			what = "not initialized yet"
		default:
			continue
		}
		if out == 0 {
			b.WriteString(". Out of service: ")
		} else {
			b.WriteString("; ")
		}
		out++
		fmt.Fprintf(&b, "node %d of %d, %s", i+1, len(reports), what)
		if rp.Reason != "" {
			b.WriteString(" (" + rp.Reason + ")")
		}
		if !rp.Until.IsZero() {
			b.WriteString(", until about " + rp.Until.UTC().Format(time.RFC3339))
		}
	}
	if out == 0 {
		b.WriteString("; try again")
		return b.String()
	}
	fmt.Fprintf(&b, ". A quorum is expected back in %v (Retry-After); retrying sooner fails the same way", retry.Round(time.Second))
	return b.String()
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
	setHeaders(w.Header(), problemHeaders, []string{api.MediaProblem, "no-store"})
	w.WriteHeader(p.Status)
	encodeJSON(w, p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	setHeaders(w.Header(), jsonHeaders, []string{api.MediaJSON})
	w.WriteHeader(status)
	encodeJSON(w, v)
}

// Canonical names of the response headers the handlers set (see
// setHeaders), and the lists they are set in.
var (
	hdrContentType  = http.CanonicalHeaderKey("Content-Type")
	hdrCacheControl = http.CanonicalHeaderKey("Cache-Control")
	hdrLocation     = http.CanonicalHeaderKey("Location")
	hdrLeaseID      = http.CanonicalHeaderKey(api.HeaderLeaseID)
	hdrFencingToken = http.CanonicalHeaderKey(api.HeaderFencingToken)
	hdrETag         = http.CanonicalHeaderKey(api.HeaderETag)

	problemHeaders = []string{hdrContentType, hdrCacheControl}
	jsonHeaders    = []string{hdrContentType}
	leaseHeaders   = []string{hdrLeaseID, hdrFencingToken, hdrETag, hdrCacheControl, hdrContentType, hdrLocation}
	lockHeaders    = []string{hdrETag, hdrContentType}
)

// setHeaders does h.Set(names[i], vals[i]) for each value but "", which
// leaves its header alone, with one allocation in all (vals) instead of one
// per header. names must be in canonical form. Each header gets a slice of
// vals whose capacity ends at its value, so that adding to it copies.
func setHeaders(h http.Header, names, vals []string) {
	for i := range vals {
		if vals[i] != "" {
			h[names[i]] = vals[i : i+1 : i+1]
		}
	}
}

// jsonBuffer is an encoder with its buffer, kept in jsonBuffers between
// answers.
type jsonBuffer struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonBuffers = sync.Pool{New: func() any {
	b := &jsonBuffer{}
	b.enc = json.NewEncoder(&b.buf)
	return b
}}

// encodeJSON writes v as json.NewEncoder(w).Encode(v) does (with its
// newline, in one Write, nothing when v cannot be encoded), with a pooled
// encoder and buffer.
func encodeJSON(w io.Writer, v any) {
	b := jsonBuffers.Get().(*jsonBuffer)
	b.buf.Reset()
	if err := b.enc.Encode(v); err == nil {
		_, _ = w.Write(b.buf.Bytes())
	}
	if b.buf.Cap() <= 64<<10 {
		jsonBuffers.Put(b)
	}
}

// lockNodes says "1 lock node" or "n lock nodes".
func lockNodes(n int) string {
	if n == 1 {
		return "1 lock node"
	}
	return strconv.Itoa(n) + " lock nodes"
}
