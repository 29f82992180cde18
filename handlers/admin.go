package handlers

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
)

// Lister is what GET /locks needs of the lock service (*lockcore.Redlock).
type Lister interface {
	List(ctx context.Context, prefix string, limit int, cursor string) (*lockcore.ListPage, error)
}

// ForceReleaser is what DELETE /locks/{resource}?force=true needs of the
// lock service (*lockcore.Redlock).
type ForceReleaser interface {
	ForceRelease(ctx context.Context, resource string) (int64, error)
}

// list handles GET /locks: a page of held locks whose names start with
// prefix, kept within the caller's grants (Options.Grants): a prefix under
// a grant is listed, one that covers grants is narrowed to them (listed one
// after another), any other is refused with 403. The cursor is sealed
// (cursorSeal) and holds only names the caller may see.
func (s *server) list(w http.ResponseWriter, r *http.Request) {
	if s.watch != nil && wantsStream(r) {
		s.streamPrefix(w, r)
		return
	}
	lister, ok := s.locker.(Lister)
	if !ok {
		problem(w, r, http.StatusInternalServerError, apiInternal, "this lock service cannot list locks")
		return
	}
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		limit, _ = strconv.Atoi(v) // checked by the contract
	}
	prefix := q.Get("prefix")
	var grants []string
	all := true
	if s.opt.Grants != nil {
		grants, all = s.opt.Grants(r)
	}
	parts := listParts(prefix, grants, all)
	if len(parts) == 0 {
		problem(w, r, http.StatusForbidden, apiForbidden, "this token may list no resource whose name starts with "+
			strconv.Quote(prefix))
		return
	}
	caller := s.caller(r)
	pos := listPosition{Part: parts[0]}
	if c := q.Get("cursor"); c != "" {
		var ok bool
		if pos, ok = s.cursors.open(caller, prefix, c); !ok || !slices.Contains(parts, pos.Part) {
			p := newProblem(r, http.StatusBadRequest, apiInvalid, "cursor: is not a next_cursor of this caller's "+
				"listing with this prefix from this gateway process, or the caller's grants changed since")
			p.Field = "cursor"
			writeProblem(w, r, p, apiInvalid)
			return
		}
	}
	page, err := lister.List(r.Context(), pos.Part, limit, pos.Inner)
	if errors.Is(err, lockcore.ErrNotSupported) {
		problem(w, r, http.StatusInternalServerError, apiInternal, "a lock node cannot list locks")
		return
	}
	if err != nil {
		fail(w, r, err)
		return
	}
	out := api.LockList{Locks: make([]api.LockInfo, 0, len(page.Locks))}
	for _, l := range page.Locks {
		out.Locks = append(out.Locks, api.LockInfo{
			Resource: l.Resource, FencingToken: l.Token, Owner: l.Owner,
			TTLms: l.TTL.Milliseconds(), ExpiresAt: l.Expires.UTC(), GrantedAt: grantedAt(l.Granted),
		})
	}
	if page.Next != "" {
		out.NextCursor = s.cursors.seal(caller, prefix, listPosition{Part: pos.Part, Inner: page.Next})
	} else if i := slices.Index(parts, pos.Part); i+1 < len(parts) {
		out.NextCursor = s.cursors.seal(caller, prefix, listPosition{Part: parts[i+1]})
	}
	setOutcome(r, "listed")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// forced reports whether a DELETE asks for a force release (force=true; the
// contract has refused a value that is not a boolean).
func forced(r *http.Request) bool {
	if r.URL.RawQuery == "" {
		return false
	}
	v, err := strconv.ParseBool(r.URL.Query().Get("force"))
	return err == nil && v
}

// forceRelease handles DELETE /locks/{resource}?force=true: the lock is
// broken whatever lease holds it. Only with access control on
// (Options.AllowForce), where the access control has let the caller through
// for the force operation.
func (s *server) forceRelease(w http.ResponseWriter, r *http.Request) {
	if !s.opt.AllowForce {
		problem(w, r, http.StatusForbidden, apiForbidden, "force release needs access control: run the gateway with "+
			"-auth-file (LOCKGATE_AUTH_FILE) and give a token the force operation (see docs/operations.md)")
		return
	}
	fr, ok := s.locker.(ForceReleaser)
	if !ok {
		problem(w, r, http.StatusInternalServerError, apiInternal, "this lock service cannot force a release")
		return
	}
	done := func(bool) {}
	if s.watch != nil {
		done = s.watch.ForceReleasing(resourceParam(r))
	}
	tok, err := fr.ForceRelease(r.Context(), resourceParam(r))
	done(err == nil)
	if err != nil {
		if errors.Is(err, lockcore.ErrNotSupported) {
			problem(w, r, http.StatusInternalServerError, apiInternal, "a lock node cannot force a release")
			return
		}
		fail(w, r, err)
		return
	}
	setToken(r, tok)
	setOutcome(r, "force_released")
	w.WriteHeader(http.StatusNoContent)
}

var apiForbidden = problemKind{api.ProblemForbidden, "Forbidden", "forbidden"}

// grantedAt is a lock's granted_at: t in UTC, or nil when t is zero (a
// lock service that does not tell).
func grantedAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
