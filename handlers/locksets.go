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
	"github.com/lockgate/lockgate/lockcore/watch"
)

// SetLocker is what /locksets/... needs of the lock service
// (*lockcore.Redlock): lock sets.
type SetLocker interface {
	AcquireSet(ctx context.Context, req lockcore.SetAcquireRequest) (*lockcore.SetLease, error)
	ExtendSet(ctx context.Context, req lockcore.SetExtendRequest) (*lockcore.SetLease, error)
	ReleaseSet(ctx context.Context, req lockcore.SetReleaseRequest) error
	InspectSet(ctx context.Context, resources []string) ([]lockcore.SetMemberInfo, error)
}

// setPrefix starts every lock set path: /locksets/{a,b,c}.
const setPrefix = "/locksets/"

// setRoutes serves /locksets/{resources} when the Locker keeps lock sets;
// otherwise those paths answer 404 as unknown routes do.
func (s *server) setRoutes(r chi.Router) {
	if s.sets == nil {
		return
	}
	r.Put("/locksets/{resources}", s.acquireSet)
	r.Patch("/locksets/{resources}", s.extendSet)
	r.Delete("/locksets/{resources}", s.releaseSet)
	r.Get("/locksets/{resources}", s.inspectSet)
}

// membersParam returns the members a lock set path names, in its order.
func membersParam(r *http.Request) []string {
	return lockcore.SplitSetName(chi.URLParam(r, "resources"))
}

// failSet maps the lock set errors to problems, each naming the member at
// fault, and every other error as fail does.
func failSet(w http.ResponseWriter, r *http.Request, err error) {
	serr, member := errors.AsType[*lockcore.SetError](err)
	switch {
	case member && (errors.Is(err, lockcore.ErrNotHeld) || errors.Is(err, lockcore.ErrHeldByOther)):
		// Another lease holding the member is, for this set, the set lost.
		problem(w, r, http.StatusNotFound, apiNotHeld, "this lease does not hold "+serr.Resource+
			" (expired, broken, or never granted): the set is lost, and the members it still held were released")
	case errors.Is(err, lockcore.ErrNotHeld):
		problem(w, r, http.StatusNotFound, apiNotHeld, "this lease holds no member of the set (released, expired, or never granted)")
	default:
		fail(w, r, err)
	}
}

// acquireSet handles PUT /locksets/{resources}.
func (s *server) acquireSet(w http.ResponseWriter, r *http.Request) {
	var body api.AcquireRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := lockcore.SetAcquireRequest{Resources: membersParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID), TTL: s.opt.DefaultTTL}
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
	set, err := s.sets.AcquireSet(r.Context(), req)
	if err != nil {
		failSet(w, r, err)
		if req.Wait > 0 && errors.Is(err, lockcore.ErrTaken) {
			setOutcome(r, "timed_out")
		}
		return
	}
	status, outcome := http.StatusCreated, "acquired"
	if set.Reentered {
		status, outcome = http.StatusOK, "reentered"
	}
	setOutcome(r, outcome)
	for _, m := range set.Members {
		s.changed(m.Resource, watch.Acquired)
	}
	writeSet(w, status, set, !set.Reentered)
}

// extendSet handles PATCH /locksets/{resources}.
func (s *server) extendSet(w http.ResponseWriter, r *http.Request) {
	var body api.ExtendRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := lockcore.SetExtendRequest{Resources: membersParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID)}
	if body.TTLms != nil {
		req.TTL = time.Duration(*body.TTLms) * time.Millisecond
	}
	set, err := s.sets.ExtendSet(r.Context(), req)
	if err != nil {
		failSet(w, r, err)
		return
	}
	setOutcome(r, "extended")
	writeSet(w, http.StatusOK, set, false)
}

// releaseSet handles DELETE /locksets/{resources}.
func (s *server) releaseSet(w http.ResponseWriter, r *http.Request) {
	req := lockcore.SetReleaseRequest{Resources: membersParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID)}
	if err := s.sets.ReleaseSet(r.Context(), req); err != nil {
		failSet(w, r, err)
		return
	}
	setOutcome(r, "released")
	for _, m := range req.Resources {
		s.changed(m, watch.Released)
	}
	w.WriteHeader(http.StatusNoContent)
}

// inspectSet handles GET /locksets/{resources}: 404 lock-not-held when no
// member is held.
func (s *server) inspectSet(w http.ResponseWriter, r *http.Request) {
	infos, err := s.sets.InspectSet(r.Context(), membersParam(r))
	if err != nil {
		failSet(w, r, err)
		return
	}
	out := api.LockSetInfo{Members: make([]api.LockSetMemberInfo, len(infos))}
	names := make([]string, len(infos))
	held := false
	for i, in := range infos {
		names[i] = in.Resource
		out.Members[i] = api.LockSetMemberInfo{Resource: in.Resource}
		if l := in.Lock; l != nil {
			held = true
			exp := l.Expires.UTC()
			out.Members[i] = api.LockSetMemberInfo{Resource: in.Resource, Held: true, FencingToken: l.Token,
				Owner: &l.Owner, TTLms: l.TTL.Milliseconds(), ExpiresAt: &exp}
		}
	}
	if !held {
		failSet(w, r, lockcore.ErrNotHeld)
		return
	}
	out.Resources = lockcore.SetName(names)
	setOutcome(r, "held")
	writeJSON(w, http.StatusOK, &out)
}

// writeSet answers a held set with its lease id (Lease-Id, no-store), and
// its canonical path as Location when location is set.
func writeSet(w http.ResponseWriter, status int, set *lockcore.SetLease, location bool) {
	names := make([]string, len(set.Members))
	out := api.LockSet{LeaseID: set.ID, TTLms: set.TTL.Milliseconds(), ValidityMs: set.Validity.Milliseconds(),
		ExpiresAt: set.Expires.UTC(), Members: make([]api.LockSetMember, len(set.Members))}
	for i, m := range set.Members {
		names[i] = m.Resource
		out.Members[i] = api.LockSetMember{Resource: m.Resource, FencingToken: m.Token}
	}
	out.Resources = lockcore.SetName(names)
	loc := ""
	if location {
		loc = setPrefix + out.Resources
	}
	setHeaders(w.Header(), leaseHeaders, []string{set.ID, "", "", "no-store", api.MediaJSON, loc})
	w.WriteHeader(status)
	encodeJSON(w, &out)
}

// setOperation names the operation of a path below /locksets/ (see
// Operation): "set_acquire", "set_extend", "set_release", "set_inspect",
// or "other".
func setOperation(method, rest string) string {
	if rest == "" || strings.Contains(rest, "/") {
		return "other"
	}
	switch method {
	case http.MethodPut:
		return "set_acquire"
	case http.MethodPatch:
		return "set_extend"
	case http.MethodDelete:
		return "set_release"
	case http.MethodGet:
		return "set_inspect"
	}
	return "other"
}

// setAuditOp names the state-changing operation of a path below
// /locksets/, or "" (see auditOp).
func setAuditOp(method, rest string) string {
	if op := setOperation(method, rest); op != "set_inspect" && op != "other" {
		return op
	}
	return ""
}

// isSetPath reports whether path is below /locksets/.
func isSetPath(path string) bool { return strings.HasPrefix(path, setPrefix) }
