package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/api"
)

// TestReviewPermitProblemsNameNoInternalLock is a review finding: a
// permit's 409 held-by-other names the permit's internal lock ("pool/1",
// a name no client can use: /locks/pool%2F1 is refused by the contract)
// instead of the semaphore and permit the client asked about.
func TestReviewPermitProblemsNameNoInternalLock(t *testing.T) {
	t.Parallel()
	g := defaultGateway(t)
	body := `{"permits":2,"ttl_ms":30000}`
	a := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	b := g.do(t, PUT, "/semaphores/pool/permits", body).permit(t, http.StatusCreated)
	p := wantProblem(t, g.do(t, PATCH, permitURL("pool", b.Permit), "", api.HeaderLeaseID, a.LeaseID), http.StatusConflict, api.ProblemHeldByOther)
	if strings.Contains(p.Detail, "pool/") {
		t.Fatalf("detail %q names the internal lock of the permit", p.Detail)
	}
}
