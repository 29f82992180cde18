package handlers

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/watch"
)

// acquire handles PUT /locks/{resource}.
func (s *server) acquire(w http.ResponseWriter, r *http.Request) {
	var body api.AcquireRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := lockcore.AcquireRequest{
		Resource: resourceParam(r),
		LeaseID:  r.Header.Get(api.HeaderLeaseID),
		TTL:      s.opt.DefaultTTL,
	}
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
	lease, err := s.locker.Acquire(r.Context(), req)
	if err != nil {
		fail(w, r, err)
		if req.Wait > 0 && errors.Is(err, lockcore.ErrTaken) {
			setOutcome(r, "timed_out") // the wait ran out: counted apart from an immediate 409
		}
		return
	}
	status, outcome, location := http.StatusCreated, "acquired", ""
	if lease.Reentered {
		status, outcome = http.StatusOK, "reentered"
	} else if p := r.URL.Path; strings.HasPrefix(p, "/locks/") && p[len("/locks/"):] == lease.Resource {
		location = p // the same string, not made again
	} else {
		location = "/locks/" + lease.Resource
	}
	setOutcome(r, outcome)
	setToken(r, lease.Token)
	s.changed(lease.Resource, watch.Acquired)
	writeLease(w, status, lease, location)
}

// extend handles PATCH /locks/{resource}.
func (s *server) extend(w http.ResponseWriter, r *http.Request) {
	var body api.ExtendRequest
	if !s.decode(w, r, &body) {
		return
	}
	req := lockcore.ExtendRequest{Resource: resourceParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID), IfToken: ifMatch(r)}
	if body.TTLms != nil {
		req.TTL = time.Duration(*body.TTLms) * time.Millisecond
	}
	lease, err := s.locker.Extend(r.Context(), req)
	if err != nil {
		fail(w, r, err)
		return
	}
	setOutcome(r, "extended")
	setToken(r, lease.Token)
	writeLease(w, http.StatusOK, lease, "")
}

// release handles DELETE /locks/{resource}.
func (s *server) release(w http.ResponseWriter, r *http.Request) {
	if forced(r) {
		s.forceRelease(w, r)
		return
	}
	if r.Header.Get(api.HeaderLeaseID) == "" {
		// Optional in the contract only for a force release.
		p := newProblem(r, http.StatusBadRequest, apiInvalid, api.HeaderLeaseID+": is required without force=true")
		p.Field = api.HeaderLeaseID
		writeProblem(w, r, p, apiInvalid)
		return
	}
	req := lockcore.ReleaseRequest{Resource: resourceParam(r), LeaseID: r.Header.Get(api.HeaderLeaseID), IfToken: ifMatch(r)}
	if err := s.locker.Release(r.Context(), req); err != nil {
		fail(w, r, err)
		return
	}
	setOutcome(r, "released")
	s.changed(req.Resource, watch.Released)
	w.WriteHeader(http.StatusNoContent)
}

// inspect handles GET /locks/{resource}.
func (s *server) inspect(w http.ResponseWriter, r *http.Request) {
	if s.watch != nil && wantsStream(r) && r.Method == http.MethodGet {
		s.stream(w, r)
		return
	}
	if s.watch != nil && r.URL.Query().Has("wait_ms") {
		s.longPoll(w, r)
		return
	}
	info, err := s.locker.Inspect(r.Context(), resourceParam(r))
	if err != nil {
		fail(w, r, err)
		return
	}
	setOutcome(r, "held")
	setHeaders(w.Header(), lockHeaders, []string{etag(info.Token), api.MediaJSON})
	w.WriteHeader(http.StatusOK)
	encodeJSON(w, &api.LockInfo{
		Resource: info.Resource, FencingToken: info.Token, Owner: info.Owner,
		TTLms: info.TTL.Milliseconds(), ExpiresAt: info.Expires.UTC(), GrantedAt: grantedAt(info.Granted),
	})
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.opt.Drain.Draining() {
		fail(w, r, lockcore.ErrClosed) // 503 shutting-down, Retry-After
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opt.ReadyTimeout)
	defer cancel()
	var err error
	if lr, ok := s.locker.(lastReadier); ok {
		err = lr.LastReady(ctx)
	} else {
		err = s.locker.Ready(ctx)
	}
	var quorum *lockcore.QuorumError
	if nr, ok := s.locker.(nodeReporter); ok && errors.As(err, &quorum) {
		answerNoQuorum(w, r, quorum, nodeStates(nr.NodeReports()))
		return
	}
	if err != nil {
		fail(w, r, err)
		return
	}
	ready := api.Health{Status: "ready"}
	if nr, ok := s.locker.(nodeReporter); ok {
		ready.Nodes = nodeStates(nr.NodeReports())
	}
	writeJSON(w, http.StatusOK, ready)
}

// lastReadier is implemented by a Locker that answers readiness from its
// last check of the nodes (lockcore.Redlock): /readyz, which anyone may ask
// as often as they like, then costs the nodes nothing.
type lastReadier interface {
	LastReady(ctx context.Context) error
}

// nodeReporter is implemented by a Locker that reports its nodes' states
// (lockcore.Redlock): /readyz gives them in its 200 and its 503.
type nodeReporter interface {
	NodeReports() []lockcore.NodeReport
}

// nodeStates turns node reports into the nodes member of /readyz's
// answers. An unreachable node's reason is its Cause, which holds no
// address (its Reason, the error, may). Before the node guard's first
// pass (every state empty) it is nil.
func nodeStates(reports []lockcore.NodeReport) []api.NodeState {
	if !slices.ContainsFunc(reports, func(rp lockcore.NodeReport) bool { return rp.State != "" }) {
		return nil
	}
	out := make([]api.NodeState, len(reports))
	for i, rp := range reports {
		out[i] = api.NodeState{State: string(rp.State), Reason: rp.Reason}
		if rp.State == lockcore.NodeUnreachable {
			out[i].Reason = rp.Cause // the error may name the node's address
		}
		if !rp.Since.IsZero() {
			since := rp.Since.UTC()
			out[i].Since = &since
		}
		if !rp.Until.IsZero() {
			until := rp.Until.UTC()
			out[i].Until = &until
		}
	}
	return out
}

func resourceParam(r *http.Request) string { return chi.URLParam(r, "resource") }

// ifMatch returns the fencing token of an If-Match header ("42"), or 0. The
// contract middleware has already checked its form.
func ifMatch(r *http.Request) int64 {
	v := strings.Trim(r.Header.Get(api.HeaderIfMatch), `"`)
	if v == "" {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func etag(token int64) string {
	var b [24]byte
	return string(append(strconv.AppendInt(append(b[:0], '"'), token, 10), '"'))
}

// writeLease answers a lease with its headers, and Location unless it is "".
func writeLease(w http.ResponseWriter, status int, l *lockcore.Lease, location string) {
	tag := etag(l.Token)
	setHeaders(w.Header(), leaseHeaders, []string{l.ID, tag[1 : len(tag)-1], tag, "no-store", api.MediaJSON, location})
	w.WriteHeader(status)
	encodeJSON(w, &api.Lease{
		Resource: l.Resource, LeaseID: l.ID, FencingToken: l.Token,
		TTLms: l.TTL.Milliseconds(), ValidityMs: l.Validity.Milliseconds(), ExpiresAt: l.Expires.UTC(),
	})
}

// changed tells the watchers of resource that this replica changed it.
func (s *server) changed(resource string, how watch.Kind) {
	if s.watch != nil {
		s.watch.Changed(resource, how)
	}
}
