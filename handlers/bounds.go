package handlers

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// limiter is what a Locker may tell of its configured bounds
// (*lockcore.Redlock does). Without it a number outside the contract's range
// is described by the contract alone.
type limiter interface {
	Limits() (minTTL, maxTTL, maxWait time.Duration)
}

// boundsOf returns the reason a ttl_ms or wait_ms outside the locker's
// configured range is refused, worded as lockcore words it for a value
// inside the contract's range but outside the server's, so that every
// out-of-range value gets the same answer.
func boundsOf(locker Locker) func(field string) (string, bool) {
	l, ok := locker.(limiter)
	if !ok {
		return nil
	}
	return func(field string) (string, bool) {
		minTTL, maxTTL, maxWait := l.Limits()
		switch field {
		case "ttl_ms":
			return fmt.Sprintf("must be between %d and %d", minTTL.Milliseconds(), maxTTL.Milliseconds()), true
		case "wait_ms":
			return fmt.Sprintf("must be between 0 and %d", maxWait.Milliseconds()), true
		}
		return "", false
	}
}

// resourceRule is the rule a resource name follows, as lockcore states it.
const resourceRule = "must be 1 to 200 characters of A-Z a-z 0-9 . _ - : (a slash is not one of them)"

// notFound answers a path no route serves. A path below /locks/ with a
// slash in it is a resource name that breaks the naming rule, whatever the
// method: 400 naming the rule, as for any other bad name. Anything else is
// 404.
func notFound(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/locks/"); ok && rest != "" {
		p := newProblem(r, http.StatusBadRequest, apiInvalid, "resource: "+resourceRule)
		p.Field = "resource"
		writeProblem(w, r, p, apiInvalid)
		return
	}
	problem(w, r, http.StatusNotFound, apiNotFound, "no such route: "+r.URL.Path)
}
