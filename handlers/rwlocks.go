package handlers

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
)

// RWLocker is what /rwlocks/... needs of the lock service
// (*lockcore.Redlock): readers-writer locks.
type RWLocker interface {
	AcquireRW(ctx context.Context, req lockcore.RWAcquireRequest) (*lockcore.RWLease, error)
	ExtendRW(ctx context.Context, req lockcore.RWExtendRequest) (*lockcore.RWLease, error)
	ReleaseRW(ctx context.Context, req lockcore.RWReleaseRequest) error
	InspectRW(ctx context.Context, name string) (*lockcore.RWInfo, error)
}

var (
	apiModeHeld     = problemKind{api.ProblemModeHeld, "Lease holds the lock in the other mode", "mode_held"}
	apiNotSupported = problemKind{api.ProblemNotSupported, "Not supported by the lock nodes", "not_supported"}
)

// rwPrefix starts every readers-writer lock path.
const rwPrefix = "/rwlocks/"

// rwRoutes serves /rwlocks/{resource} when the Locker keeps readers-writer
// locks; otherwise those paths answer 404 as unknown routes do.
func (s *server) rwRoutes(r chi.Router) {
	if s.rw == nil {
		return
	}
	r.Put("/rwlocks/{resource}", s.acquireRW)
	r.Patch("/rwlocks/{resource}", s.extendRW)
	r.Delete("/rwlocks/{resource}", s.releaseRW)
	r.Get("/rwlocks/{resource}", s.inspectRW)
}

// failRW maps the readers-writer errors to problems, and every other
// error as fail does.
func failRW(w http.ResponseWriter, r *http.Request, err error) {
	var taken *lockcore.TakenError
	switch {
	case errors.Is(err, lockcore.ErrModeHeld):
		problem(w, r, http.StatusConflict, apiModeHeld, "this lease holds "+resourceParam(r)+
			" in the other mode: an upgrade from shared to exclusive, or the reverse, is refused; release, then acquire in the mode wanted")
	case errors.As(err, &taken):
		conflict(w, r, apiTaken, resourceParam(r)+" is held in a conflicting mode, or a writer waits for it", taken.RetryAfter)
	case errors.Is(err, lockcore.ErrNotHeld) && r.Method != http.MethodGet && r.Method != http.MethodHead:
		problem(w, r, http.StatusNotFound, apiNotHeld, "this lease holds nothing on "+resourceParam(r)+" (released, expired, or never granted)")
	case errors.Is(err, lockcore.ErrNotSupported):
		problem(w, r, http.StatusNotImplemented, apiNotSupported, "a lock node of this gateway keeps no readers-writer locks")
	default:
		fail(w, r, err)
	}
}

func modeOf(exclusive bool) string {
	if exclusive {
		return api.ModeExclusive
	}
	return api.ModeShared
}

// acquireRW handles PUT /rwlocks/{resource}.
func (s *server) acquireRW(w http.ResponseWriter, r *http.Request) {
	var body api.RWAcquireRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := lockcore.RWAcquireRequest{Name: resourceParam(r), Exclusive: body.Mode == nil || *body.Mode == api.ModeExclusive,
		LeaseID: r.Header.Get(api.HeaderLeaseID), TTL: s.opt.DefaultTTL}
	if body.TTLms != nil {
		req.TTL = time.Duration(*body.TTLms) * time.Millisecond
	}
	if body.WaitMs != nil {
		req.Wait = time.Duration(*body.WaitMs) * time.Millisecond
	}
	if body.Owner != nil {
		req.Owner = *body.Owner
	}
	if req.Wait > 0 && s.waiters != nil {
		key := s.callerKey(r)
		if !s.waiters.take(key, 1) {
			s.waiters.overShare(w, r)
			return
		}
		defer s.waiters.done(key, 1)
	}
	l, err := s.rw.AcquireRW(r.Context(), req)
	if err != nil {
		failRW(w, r, err)
		if req.Wait > 0 && errors.Is(err, lockcore.ErrTaken) {
			setOutcome(r, "timed_out")
		}
		return
	}
	status, outcome := http.StatusCreated, "acquired"
	if l.Reentered {
		status, outcome = http.StatusOK, "reentered"
	}
	setOutcome(r, outcome)
	setToken(r, l.Token)
	writeRWLease(w, status, l, modeOf(l.Exclusive), rwPrefix+l.Name)
}

// extendRW handles PATCH /rwlocks/{resource}.
func (s *server) extendRW(w http.ResponseWriter, r *http.Request) {
	var body api.ExtendRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := lockcore.RWExtendRequest{Name: resourceParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID)}
	if body.TTLms != nil {
		req.TTL = time.Duration(*body.TTLms) * time.Millisecond
	}
	l, err := s.rw.ExtendRW(r.Context(), req)
	if err != nil {
		failRW(w, r, err)
		return
	}
	setOutcome(r, "extended")
	setToken(r, l.Token)
	writeRWLease(w, http.StatusOK, l, "", "")
}

// releaseRW handles DELETE /rwlocks/{resource}.
func (s *server) releaseRW(w http.ResponseWriter, r *http.Request) {
	err := s.rw.ReleaseRW(r.Context(), lockcore.RWReleaseRequest{Name: resourceParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID)})
	if err != nil {
		failRW(w, r, err)
		return
	}
	setOutcome(r, "released")
	w.WriteHeader(http.StatusNoContent)
}

// inspectRW handles GET /rwlocks/{resource}: 404 lock-not-held when no
// hold is kept by a quorum.
func (s *server) inspectRW(w http.ResponseWriter, r *http.Request) {
	info, err := s.rw.InspectRW(r.Context(), resourceParam(r))
	if err == nil && len(info.Holders) == 0 {
		err = lockcore.ErrNotHeld
	}
	if err != nil {
		failRW(w, r, err)
		return
	}
	setOutcome(r, "held")
	out := api.RWLockInfo{Resource: info.Name, Mode: api.ModeShared, WriterWaiting: info.WriterWaiting,
		Holders: make([]api.RWHolder, len(info.Holders))}
	for i, h := range info.Holders {
		if h.Exclusive {
			out.Mode = api.ModeExclusive
		}
		out.Holders[i] = api.RWHolder{Mode: modeOf(h.Exclusive), FencingToken: h.Token, Owner: h.Owner,
			TTLms: h.TTL.Milliseconds(), ExpiresAt: h.Expires.UTC()}
	}
	writeJSON(w, http.StatusOK, &out)
}

// writeRWLease answers a hold with the lease headers, and Location unless
// it is "".
func writeRWLease(w http.ResponseWriter, status int, l *lockcore.RWLease, mode, location string) {
	tag := etag(l.Token)
	setHeaders(w.Header(), leaseHeaders, []string{l.ID, tag[1 : len(tag)-1], tag, "no-store", api.MediaJSON, location})
	w.WriteHeader(status)
	encodeJSON(w, &api.RWLease{Resource: l.Name, Mode: mode, LeaseID: l.ID, FencingToken: l.Token,
		TTLms: l.TTL.Milliseconds(), ValidityMs: l.Validity.Milliseconds(), ExpiresAt: l.Expires.UTC()})
}

// rwOperation names the operation of a path below /rwlocks/ (see
// Operation): "rw_acquire", "rw_extend", "rw_release", "rw_inspect", or
// "other".
func rwOperation(method, rest string) string {
	if rest == "" || strings.Contains(rest, "/") {
		return "other"
	}
	switch method {
	case http.MethodPut:
		return "rw_acquire"
	case http.MethodPatch:
		return "rw_extend"
	case http.MethodDelete:
		return "rw_release"
	case http.MethodGet:
		return "rw_inspect"
	}
	return "other"
}

// rwAuditOp names the state-changing operation of a path below
// /rwlocks/, or "" (see auditOp).
func rwAuditOp(method, rest string) string {
	if op := rwOperation(method, rest); op != "rw_inspect" && op != "other" {
		return op
	}
	return ""
}

// isRWPath reports whether path is below /rwlocks/.
func isRWPath(path string) bool { return strings.HasPrefix(path, rwPrefix) }
