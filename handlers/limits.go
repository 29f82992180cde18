package handlers

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lockgate/lockgate/api"
)

// headAsGet serves HEAD as the GET of the same route (RFC 9110 §9.3.2): the
// request goes through access control, validation and the handler as a GET,
// and net/http drops the body for the HEAD the client sent.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
		}
		next.ServeHTTP(w, r)
	})
}

// limiterIdle is how long a caller's limiter is kept without requests.
const limiterIdle = 10 * time.Minute

// rateLimiter allows each caller (Options.Caller's name, the client
// certificate's subject, else the client's IP address) perRequests per
// second on /locks, /locks/..., /semaphores/..., /rwlocks/... and
// /locksets/..., with bursts of burst.
type rateLimiter struct {
	s         *server
	limit     rate.Limit
	burst     int
	mu        sync.Mutex
	callers   map[string]*callerLimit
	nextSweep time.Time
}

type callerLimit struct {
	lim  *rate.Limiter
	seen time.Time
}

func (s *server) rateLimit(perSecond float64, burst int) func(http.Handler) http.Handler {
	rl := &rateLimiter{s: s, limit: rate.Limit(perSecond), burst: max(burst, 1), callers: map[string]*callerLimit{}}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/locks" && !strings.HasPrefix(r.URL.Path, "/locks/") && !isSemaphorePath(r.URL.Path) && !isRWPath(r.URL.Path) && !isSetPath(r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			if wait := rl.take(rl.s.callerKey(r), time.Now()); wait > 0 {
				w.Header().Set(api.HeaderRetryAfter, strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
				ms := wait.Milliseconds()
				p := newProblem(r, http.StatusTooManyRequests, apiRateLimited, "over this caller's limit of "+
					strconv.FormatFloat(float64(rl.limit), 'g', -1, 64)+" requests per second; try again later")
				p.RetryAfterMs = &ms
				writeProblem(w, r, p, apiRateLimited)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// callerKey is the key of the request's caller for its rate limit and its
// share of waiters: its name (Options.Caller, else the client
// certificate's subject), else its IP address.
func (s *server) callerKey(r *http.Request) string {
	name := s.caller(r)
	if name != "anonymous" {
		return "caller:" + name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// take spends one request of key's allowance, or returns how long until
// one is available (spending nothing).
func (rl *rateLimiter) take(key string, now time.Time) time.Duration {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if now.After(rl.nextSweep) {
		for k, c := range rl.callers {
			if now.Sub(c.seen) > limiterIdle {
				delete(rl.callers, k)
			}
		}
		rl.nextSweep = now.Add(limiterIdle)
	}
	c := rl.callers[key]
	if c == nil {
		c = &callerLimit{lim: rate.NewLimiter(rl.limit, rl.burst)}
		rl.callers[key] = c
	}
	c.seen = now
	res := c.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

var apiRateLimited = problemKind{api.ProblemRateLimited, "Rate limit exceeded", "rate_limited"}
