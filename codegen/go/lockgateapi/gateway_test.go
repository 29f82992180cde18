package lockgateapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/lockgate/lockgate/codegen/go/lockgateapi"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/memnode"
)

func ptr[T any](v T) *T { return &v }

// The generated client acquires, meets a 409, extends, lists and releases
// against the gateway over the embedded store, every answer decoded into
// the types the contract declares (headers included).
func TestTheGeneratedClientDrivesTheGateway(t *testing.T) {
	locker, err := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locker.Close)
	h, err := handlers.New(locker, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := lockgateapi.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	got, err := c.AcquireLockWithResponse(ctx, "gen-report", nil, lockgateapi.AcquireRequest{TtlMs: ptr[int64](10000), Owner: ptr("generated")})
	if err != nil || got.StatusCode() != http.StatusCreated || got.JSON201 == nil || got.Headers201 == nil {
		t.Fatalf("acquire: %v %d %s", err, got.StatusCode(), got.Body)
	}
	lease := got.JSON201
	if lease.FencingToken < 1 || lease.TtlMs != 10000 || lease.ValidityMs <= 0 || lease.LeaseId == "" {
		t.Fatalf("acquire: lease %+v", lease)
	}
	if hd := got.Headers201; hd.FencingToken == nil || *hd.FencingToken != lease.FencingToken || hd.LeaseId == nil || *hd.LeaseId != lease.LeaseId {
		t.Errorf("acquire: headers %+v, want the body's token and lease id", hd)
	}

	taken, err := c.AcquireLockWithResponse(ctx, "gen-report", nil, lockgateapi.AcquireRequest{})
	if err != nil || taken.StatusCode() != http.StatusConflict || taken.ApplicationproblemJSON409 == nil {
		t.Fatalf("second acquire: %v %d %s", err, taken.StatusCode(), taken.Body)
	}
	if p := taken.ApplicationproblemJSON409; p.Type != "urn:lockgate:problem:lock-taken" || p.RetryAfterMs == nil || *p.RetryAfterMs <= 0 {
		t.Errorf("second acquire: problem %+v", p)
	}

	ifMatch := `"` + strconv.FormatInt(lease.FencingToken, 10) + `"`
	ext, err := c.ExtendLockWithResponse(ctx, "gen-report", &lockgateapi.ExtendLockParams{LeaseId: lease.LeaseId, IfMatch: &ifMatch},
		lockgateapi.ExtendRequest{TtlMs: ptr[int64](20000)})
	if err != nil || ext.StatusCode() != http.StatusOK || ext.JSON200 == nil || ext.JSON200.TtlMs != 20000 || ext.JSON200.FencingToken != lease.FencingToken {
		t.Fatalf("extend: %v %d %s", err, ext.StatusCode(), ext.Body)
	}

	list, err := c.ListLocksWithResponse(ctx, &lockgateapi.ListLocksParams{Prefix: ptr("gen-")})
	if err != nil || list.StatusCode() != http.StatusOK || list.JSON200 == nil || len(list.JSON200.Locks) != 1 {
		t.Fatalf("list: %v %d %s", err, list.StatusCode(), list.Body)
	}
	if l := list.JSON200.Locks[0]; l.Resource != "gen-report" || l.Owner != "generated" || l.FencingToken != lease.FencingToken {
		t.Errorf("list: %+v", l)
	}

	rel, err := c.ReleaseLockWithResponse(ctx, "gen-report", &lockgateapi.ReleaseLockParams{LeaseId: &lease.LeaseId, IfMatch: &ifMatch})
	if err != nil || rel.StatusCode() != http.StatusNoContent {
		t.Fatalf("release: %v %d %s", err, rel.StatusCode(), rel.Body)
	}
	// A long poll with the released holder's token answers at once: the
	// lock is free (404), its token 0 differs.
	wait := int64(60000)
	gone, err := c.InspectLockWithResponse(ctx, "gen-report", &lockgateapi.InspectLockParams{After: &lease.FencingToken, WaitMs: &wait})
	if err != nil || gone.StatusCode() != http.StatusNotFound || gone.ApplicationproblemJSON404 == nil {
		t.Fatalf("inspect after release: %v %d %s", err, gone.StatusCode(), gone.Body)
	}
}

// The generated client takes two readers' holds on a readers-writer lock,
// meets a 409 for a writer and a 409 mode-held for an upgrade, reads the
// readers, extends and releases, then takes the writer's hold.
func TestTheGeneratedClientDrivesReadersWriterLocks(t *testing.T) {
	locker, err := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locker.Close)
	h, err := handlers.New(locker, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := lockgateapi.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	shared := lockgateapi.RWAcquireRequest{Mode: ptr(lockgateapi.RWAcquireRequestModeShared), TtlMs: ptr[int64](10000), Owner: ptr("generated")}
	var readers []lockgateapi.RWLease
	for range 2 {
		got, err := c.AcquireRWLockWithResponse(ctx, "gen-table", nil, shared)
		if err != nil || got.StatusCode() != http.StatusCreated || got.JSON201 == nil || got.Headers201 == nil {
			t.Fatalf("reader: %v %d %s", err, got.StatusCode(), got.Body)
		}
		if l := got.JSON201; l.Mode == nil || *l.Mode != lockgateapi.RWLeaseModeShared || l.FencingToken < 1 {
			t.Fatalf("reader: %+v", l)
		}
		readers = append(readers, *got.JSON201)
	}
	taken, err := c.AcquireRWLockWithResponse(ctx, "gen-table", nil, lockgateapi.RWAcquireRequest{})
	if err != nil || taken.StatusCode() != http.StatusConflict || taken.ApplicationproblemJSON409 == nil ||
		taken.ApplicationproblemJSON409.Type != "urn:lockgate:problem:lock-taken" {
		t.Fatalf("writer beside readers: %v %d %s", err, taken.StatusCode(), taken.Body)
	}
	up, err := c.AcquireRWLockWithResponse(ctx, "gen-table", &lockgateapi.AcquireRWLockParams{LeaseId: &readers[0].LeaseId},
		lockgateapi.RWAcquireRequest{Mode: ptr(lockgateapi.RWAcquireRequestModeExclusive)})
	if err != nil || up.StatusCode() != http.StatusConflict || up.ApplicationproblemJSON409 == nil ||
		up.ApplicationproblemJSON409.Type != "urn:lockgate:problem:mode-held" {
		t.Fatalf("upgrade: %v %d %s", err, up.StatusCode(), up.Body)
	}
	info, err := c.InspectRWLockWithResponse(ctx, "gen-table")
	if err != nil || info.StatusCode() != http.StatusOK || info.JSON200 == nil || len(info.JSON200.Holders) != 2 ||
		info.JSON200.Mode != lockgateapi.RWLockInfoModeShared {
		t.Fatalf("inspect: %v %d %s", err, info.StatusCode(), info.Body)
	}
	ext, err := c.ExtendRWLockWithResponse(ctx, "gen-table", &lockgateapi.ExtendRWLockParams{LeaseId: readers[0].LeaseId},
		lockgateapi.ExtendRequest{TtlMs: ptr[int64](20000)})
	if err != nil || ext.StatusCode() != http.StatusOK || ext.JSON200 == nil || ext.JSON200.TtlMs != 20000 {
		t.Fatalf("extend: %v %d %s", err, ext.StatusCode(), ext.Body)
	}
	for _, r := range readers {
		rel, err := c.ReleaseRWLockWithResponse(ctx, "gen-table", &lockgateapi.ReleaseRWLockParams{LeaseId: r.LeaseId})
		if err != nil || rel.StatusCode() != http.StatusNoContent {
			t.Fatalf("release: %v %d %s", err, rel.StatusCode(), rel.Body)
		}
	}
	w, err := c.AcquireRWLockWithResponse(ctx, "gen-table", nil, lockgateapi.RWAcquireRequest{})
	if err != nil || w.StatusCode() != http.StatusCreated || w.JSON201 == nil || w.JSON201.FencingToken <= readers[1].FencingToken {
		t.Fatalf("writer: %v %d %s", err, w.StatusCode(), w.Body)
	}
}

// The generated client takes a lock set (members in any order, answered
// sorted with a token each), meets a 409 naming the member for a set that
// overlaps, reads, extends and releases the set.
func TestTheGeneratedClientDrivesLockSets(t *testing.T) {
	locker, err := lockcore.New([]lockcore.Node{memnode.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(locker.Close)
	h, err := handlers.New(locker, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := lockgateapi.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := c.AcquireLockSetWithResponse(ctx, []string{"gen-b", "gen-a"}, nil, lockgateapi.AcquireRequest{TtlMs: ptr[int64](10000), Owner: ptr("generated")})
	if err != nil || got.StatusCode() != http.StatusCreated || got.JSON201 == nil || got.Headers201 == nil {
		t.Fatalf("acquire: %v %d %s", err, got.StatusCode(), got.Body)
	}
	set := got.JSON201
	if set.Resources != "gen-a,gen-b" || len(set.Members) != 2 || set.Members[0].Resource != "gen-a" || set.Members[1].FencingToken < 1 {
		t.Fatalf("acquire: %+v", set)
	}
	taken, err := c.AcquireLockSetWithResponse(ctx, []string{"gen-c", "gen-b"}, nil, lockgateapi.AcquireRequest{})
	if err != nil || taken.StatusCode() != http.StatusConflict || taken.ApplicationproblemJSON409 == nil ||
		taken.ApplicationproblemJSON409.Type != "urn:lockgate:problem:lock-taken" {
		t.Fatalf("an overlapping set: %v %d %s", err, taken.StatusCode(), taken.Body)
	}
	info, err := c.InspectLockSetWithResponse(ctx, []string{"gen-a", "gen-b", "gen-c"})
	if err != nil || info.StatusCode() != http.StatusOK || info.JSON200 == nil || len(info.JSON200.Members) != 3 ||
		!info.JSON200.Members[1].Held || info.JSON200.Members[2].Held {
		t.Fatalf("inspect: %v %d %s", err, info.StatusCode(), info.Body)
	}
	ext, err := c.ExtendLockSetWithResponse(ctx, []string{"gen-a", "gen-b"}, &lockgateapi.ExtendLockSetParams{LeaseId: set.LeaseId},
		lockgateapi.ExtendRequest{TtlMs: ptr[int64](20000)})
	if err != nil || ext.StatusCode() != http.StatusOK || ext.JSON200 == nil || ext.JSON200.TtlMs != 20000 {
		t.Fatalf("extend: %v %d %s", err, ext.StatusCode(), ext.Body)
	}
	rel, err := c.ReleaseLockSetWithResponse(ctx, []string{"gen-a", "gen-b"}, &lockgateapi.ReleaseLockSetParams{LeaseId: set.LeaseId})
	if err != nil || rel.StatusCode() != http.StatusNoContent {
		t.Fatalf("release: %v %d %s", err, rel.StatusCode(), rel.Body)
	}
	gone, err := c.InspectLockSetWithResponse(ctx, []string{"gen-a", "gen-b"})
	if err != nil || gone.StatusCode() != http.StatusNotFound || gone.ApplicationproblemJSON404 == nil {
		t.Fatalf("inspect after release: %v %d %s", err, gone.StatusCode(), gone.Body)
	}
}
