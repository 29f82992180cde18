package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/semaphore"
)

var (
	apiPermitsMismatch = problemKind{api.ProblemPermitsMismatch, "Semaphore held with another number of permits", "permits_mismatch"}
	apiSemaphoreFull   = problemKind{api.ProblemSemaphoreFull, "Every permit is held", "full"}
)

// semaphoreRoutes serves /semaphores/{resource} and its permits. The name
// parameter is called resource, as for /locks, so that the problems of
// fail name it.
func (s *server) semaphoreRoutes(r chi.Router) {
	r.Put("/semaphores/{resource}/permits", s.acquirePermit)
	r.Patch("/semaphores/{resource}/permits/{permit}", s.extendPermit)
	r.Delete("/semaphores/{resource}/permits/{permit}", s.releasePermit)
	r.Get("/semaphores/{resource}", s.inspectSemaphore)
}

// failSemaphore maps the semaphore errors to problems, and every other
// error as fail does. A problem about one permit names it as "permit i of
// semaphore NAME", never by its internal lock's name, which no client can
// use.
func failSemaphore(w http.ResponseWriter, r *http.Request, err error) {
	var (
		mismatch *semaphore.MismatchError
		full     *semaphore.FullError
		other    *lockcore.HeldByOtherError
	)
	_, onPermit := permitParam(r)
	switch {
	case onPermit && errors.As(err, &other):
		conflict(w, r, apiHeldByOther, "this lease no longer holds "+permitName(r)+"; another lease does", other.RetryAfter)
	case onPermit && errors.Is(err, lockcore.ErrNotHeld):
		problem(w, r, http.StatusNotFound, apiNotHeld, "nothing holds "+permitName(r))
	case errors.As(err, &mismatch):
		p := newProblem(r, http.StatusConflict, apiPermitsMismatch, "permit "+strconv.Itoa(mismatch.HolderPermit)+
			" of "+mismatch.Name+" is held with permits="+strconv.Itoa(mismatch.Held)+", not "+strconv.Itoa(mismatch.Asked)+
			"; the number of permits is part of the semaphore while any permit is held")
		p.Field = "permits"
		writeProblem(w, r, p, apiPermitsMismatch)
	case errors.As(err, &full):
		conflict(w, r, apiSemaphoreFull, "all "+strconv.Itoa(full.Permits)+" permits of "+full.Name+" are held", full.RetryAfter)
	default:
		fail(w, r, err)
	}
}

// acquirePermit handles PUT /semaphores/{resource}/permits.
func (s *server) acquirePermit(w http.ResponseWriter, r *http.Request) {
	var body api.SemaphoreAcquireRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := semaphore.AcquireRequest{Name: resourceParam(r), Permits: body.Permits, TTL: s.opt.DefaultTTL,
		LeaseID: r.Header.Get(api.HeaderLeaseID)}
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
		// A permit's wait is K waiters, one per permit (see
		// semaphore.Semaphores.Acquire).
		if !s.waiters.take(key, req.Permits) {
			s.waiters.overShare(w, r)
			return
		}
		defer s.waiters.done(key, req.Permits)
	}
	p, err := s.sems.Acquire(r.Context(), req)
	if err != nil {
		failSemaphore(w, r, err)
		if req.Wait > 0 && errors.Is(err, semaphore.ErrFull) {
			setOutcome(r, "timed_out")
		}
		return
	}
	status, outcome := http.StatusCreated, "acquired"
	if p.Reentered {
		status, outcome = http.StatusOK, "reentered"
	}
	setOutcome(r, outcome)
	setToken(r, p.Token)
	setPermit(r, p.Index)
	writePermit(w, status, p, permitPath(p.Name, p.Index))
}

// permitIndex returns the {permit} parameter; the contract has checked
// its form (0 to 63).
func permitIndex(r *http.Request) int {
	i, _ := permitParam(r)
	return i
}

// permitParam returns the {permit} parameter, and false on a route
// without one.
func permitParam(r *http.Request) (int, bool) {
	p := chi.URLParam(r, "permit")
	i, err := strconv.Atoi(p)
	return i, p != "" && err == nil
}

// permitName names the permit of the request's path for a problem's
// detail: "permit 2 of semaphore jobs".
func permitName(r *http.Request) string {
	return "permit " + strconv.Itoa(permitIndex(r)) + " of semaphore " + resourceParam(r)
}

func permitPath(name string, i int) string {
	return "/semaphores/" + name + "/permits/" + strconv.Itoa(i)
}

// extendPermit handles PATCH /semaphores/{resource}/permits/{permit}.
func (s *server) extendPermit(w http.ResponseWriter, r *http.Request) {
	var body api.ExtendRequest
	if !s.decode(w, r, &body) {
		return
	}
	setPermit(r, permitIndex(r))
	var ttl time.Duration
	if body.TTLms != nil {
		ttl = time.Duration(*body.TTLms) * time.Millisecond
	}
	p, err := s.sems.Extend(r.Context(), resourceParam(r), permitIndex(r), r.Header.Get(api.HeaderLeaseID), ttl, ifMatch(r))
	if err != nil {
		failSemaphore(w, r, err)
		return
	}
	setOutcome(r, "extended")
	setToken(r, p.Token)
	writePermit(w, http.StatusOK, p, "")
}

// releasePermit handles DELETE /semaphores/{resource}/permits/{permit}.
func (s *server) releasePermit(w http.ResponseWriter, r *http.Request) {
	setPermit(r, permitIndex(r))
	err := s.sems.Release(r.Context(), resourceParam(r), permitIndex(r), r.Header.Get(api.HeaderLeaseID), ifMatch(r))
	if err != nil {
		failSemaphore(w, r, err)
		return
	}
	setOutcome(r, "released")
	w.WriteHeader(http.StatusNoContent)
}

// inspectSemaphore handles GET /semaphores/{resource}.
func (s *server) inspectSemaphore(w http.ResponseWriter, r *http.Request) {
	st, err := s.sems.Inspect(r.Context(), resourceParam(r))
	if err != nil {
		failSemaphore(w, r, err)
		return
	}
	setOutcome(r, "held")
	info := api.SemaphoreInfo{Semaphore: st.Name, Permits: st.Permits, InUse: len(st.Holders), Holders: make([]api.PermitHolder, len(st.Holders))}
	for i, h := range st.Holders {
		info.Holders[i] = api.PermitHolder{Permit: h.Index, FencingToken: h.Token, Owner: h.Owner,
			TTLms: h.TTL.Milliseconds(), ExpiresAt: h.Expires.UTC()}
	}
	writeJSON(w, http.StatusOK, &info)
}

// writePermit answers a permit with the lease headers, and Location unless
// it is "".
func writePermit(w http.ResponseWriter, status int, p *semaphore.Permit, location string) {
	tag := etag(p.Token)
	setHeaders(w.Header(), leaseHeaders, []string{p.ID, tag[1 : len(tag)-1], tag, "no-store", api.MediaJSON, location})
	w.WriteHeader(status)
	encodeJSON(w, &api.Permit{
		Semaphore: p.Name, Permit: p.Index, Permits: p.Permits, LeaseID: p.ID, FencingToken: p.Token,
		TTLms: p.TTL.Milliseconds(), ValidityMs: p.Validity.Milliseconds(), ExpiresAt: p.Expires.UTC(),
	})
}

// semaphoreOperation names the operation of a path below /semaphores/ (see
// Operation): "permit_acquire", "permit_extend", "permit_release",
// "semaphore_inspect", or "other".
func semaphoreOperation(method, rest string) string {
	name, sub, _ := strings.Cut(rest, "/")
	switch {
	case name == "":
		return "other"
	case sub == "" && method == http.MethodGet:
		return "semaphore_inspect"
	case sub == "permits" && method == http.MethodPut:
		return "permit_acquire"
	case !strings.HasPrefix(sub, "permits/") || strings.Contains(sub[len("permits/"):], "/"):
		return "other"
	case method == http.MethodPatch:
		return "permit_extend"
	case method == http.MethodDelete:
		return "permit_release"
	}
	return "other"
}

// semaphoreAuditOp names the state-changing operation of a path below
// /semaphores/, or "" (see auditOp).
func semaphoreAuditOp(method, rest string) string {
	switch semaphoreOperation(method, rest) {
	case "permit_acquire":
		return "permit_acquire"
	case "permit_extend":
		return "permit_extend"
	case "permit_release":
		return "permit_release"
	}
	return ""
}

// semaphorePrefix starts every semaphore path.
const semaphorePrefix = "/semaphores/"

// isSemaphorePath reports whether path is below /semaphores/.
func isSemaphorePath(path string) bool { return strings.HasPrefix(path, semaphorePrefix) }
