package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/auth"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
)

// A PUT sent again with the Lease-Id of its lost answer gets the same
// permit back with 200 and the same token, not a second permit.
func TestPermitRetryWithTheSameLeaseIDGetsTheSamePermit(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	body := `{"permits":3,"ttl_ms":30000}`
	first := g.do(t, PUT, "/semaphores/retry/permits", body, api.HeaderLeaseID, leaseA).permit(t, http.StatusCreated)
	again := g.do(t, PUT, "/semaphores/retry/permits", body, api.HeaderLeaseID, leaseA)
	p := again.permit(t, http.StatusOK)
	if p.Permit != first.Permit || p.FencingToken != first.FencingToken || p.LeaseID != leaseA {
		t.Fatalf("retry: %+v, want permit %d with token %d", p, first.Permit, first.FencingToken)
	}
	if loc := again.Header.Get("Location"); loc != permitURL("retry", first.Permit) {
		t.Errorf("Location %q", loc)
	}
	var si api.SemaphoreInfo
	if info := g.do(t, GET, "/semaphores/retry", ""); info.Status != http.StatusOK || json.Unmarshal(info.Body, &si) != nil || si.InUse != 1 {
		t.Fatalf("after the retry: %s, want one permit in use", info)
	}
	wantProblem(t, g.do(t, PUT, "/semaphores/retry/permits", body, api.HeaderLeaseID, "short"), http.StatusBadRequest, api.ProblemInvalid)
}

// Every problem about one permit names it as the client does, never by the
// permit's internal lock.
func TestPermitProblemsNameThePermit(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	body := `{"permits":2,"ttl_ms":30000}`
	a := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	b := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	want := "permit " + string(rune('0'+b.Permit)) + " of semaphore pool"
	for _, res := range []response{
		g.do(t, PATCH, permitURL("pool", b.Permit), "", api.HeaderLeaseID, a.LeaseID),
		g.do(t, DELETE, permitURL("pool", b.Permit), "", api.HeaderLeaseID, a.LeaseID),
	} {
		if p := wantProblem(t, res, http.StatusConflict, api.ProblemHeldByOther); !strings.Contains(p.Detail, want) || strings.Contains(p.Detail, "pool/") {
			t.Errorf("detail %q, want it to name %q", p.Detail, want)
		}
	}
	for _, method := range []string{PATCH, DELETE} {
		p := wantProblem(t, g.do(t, method, permitURL("pool", 5), "", api.HeaderLeaseID, a.LeaseID), http.StatusNotFound, api.ProblemNotHeld)
		if p.Detail != "nothing holds permit 5 of semaphore pool" {
			t.Errorf("%s: detail %q", method, p.Detail)
		}
	}
}

// A waiting PUT counts K against its caller's share of waiters, one per
// permit it waits for.
func TestPermitWaitCountsKAgainstTheCallersShare(t *testing.T) {
	t.Parallel()
	p, err := auth.Parse(strings.NewReader(tenantA + " * a- tenant-a\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, memNodes(3, nil), nil, &handlers.Options{
		Middleware: []func(http.Handler) http.Handler{p.Middleware}, Grants: p.Grants, Caller: p.Name,
		WaitersPerCaller: 2,
	})
	pr := wantProblem(t, g.do(t, PUT, "/semaphores/a-pool/permits", `{"permits":3,"wait_ms":1000}`, bearerOf(tenantA)...),
		http.StatusTooManyRequests, api.ProblemTooManyWaiters)
	if pr.Limit != "caller" {
		t.Fatalf("limit %q, want caller", pr.Limit)
	}
	if g.locker.Waiting() != 0 {
		t.Fatalf("%d waiters after the refusal", g.locker.Waiting())
	}
	// Two permits' wait is within the share (and finds one free at once).
	g.do(t, PUT, "/semaphores/a-pool/permits", `{"permits":2,"wait_ms":1000}`, bearerOf(tenantA)...).permit(t, http.StatusCreated)
}

// A wait_ms above the maximum and a TTL outside the bounds are refused at
// once, also while a permit is free.
func TestPermitBadTTLOrWaitIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	g := newGateway(t, memNodes(3, nil), &lockcore.Options{MaxWait: time.Second}, nil)
	for _, body := range []string{`{"permits":2,"wait_ms":2000}`, `{"permits":2,"ttl_ms":1}`} {
		wantProblem(t, g.do(t, PUT, "/semaphores/v/permits", body), http.StatusBadRequest, api.ProblemInvalid)
	}
}

// The audit line of a permit names its permit.
func TestPermitAuditLineNamesThePermit(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	g := authGateway(t, &log)
	a := g.do(t, PUT, "/semaphores/app:pool/permits", `{"permits":2,"ttl_ms":30000}`, bearerOf(appWriter)...).permit(t, http.StatusCreated)
	b := g.do(t, PUT, "/semaphores/app:pool/permits", `{"permits":2,"ttl_ms":30000}`, bearerOf(appWriter)...).permit(t, http.StatusCreated)
	if res := g.do(t, DELETE, permitURL("app:pool", b.Permit), "", append(bearerOf(appWriter), api.HeaderLeaseID, b.LeaseID)...); res.Status != http.StatusNoContent {
		t.Fatal(res)
	}
	var got []float64
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["audit"] == true {
			n, ok := m["permit"].(float64)
			if !ok {
				t.Errorf("audit line without a permit: %s", line)
			}
			got = append(got, n)
			if m["resource"] != "app:pool" {
				t.Errorf("audit resource %v", m["resource"])
			}
		}
	}
	want := []float64{float64(a.Permit), float64(b.Permit), float64(b.Permit)}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("audit permits %v, want %v\n%s", got, want, logs.String())
	}
}
