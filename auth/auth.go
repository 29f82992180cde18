// Package auth is lockgate's optional access control: bearer tokens read
// from a file, each allowed a set of HTTP methods on a set of resource-name
// prefixes.
//
// # The token file
//
// One token per line, three or four fields separated by spaces or tabs:
//
//	# token                            methods               resource prefixes  name
//	billing-7Q2vX9kLmN4pR8sT1uW3yZ5a   PUT,PATCH,DELETE,GET  invoice-,billing:  billing-service
//	dashboard-Hc6Jd8Kf0Lg2Mh4Nj6Pk8Q   GET                   *                  dashboard
//	oncall-Zr5Tq1Wm7Yp3Lk9Hx2Vb6Nc8Jd   GET,force             *                  on-call
//
// The fields:
//
//   - token: 16 to 4096 characters of A-Z a-z 0-9 - . _ ~ + / = (the
//     RFC 6750 token alphabet). Generate one with, e.g.,
//     head -c 24 /dev/urandom | base64 | tr '+/' '-_'.
//   - methods: a comma-separated list of GET, PUT, PATCH, DELETE (or their
//     operation names inspect, acquire, extend, release; any case), or * for
//     all four, and force: breaking a lock whoever holds it (DELETE
//     /locks/{resource}?force=true). * does not include force: it must be
//     named. GET also allows listing held locks (GET /locks), kept within
//     the token's prefixes: a listing prefix under one of them is listed,
//     one that covers some of them is narrowed to those, any other is
//     refused with 403.
//   - resource prefixes: a comma-separated list of prefixes of resource
//     names, or * for every resource. A prefix is matched as plain text:
//     "invoice-" allows invoice-42 and invoice-7, not invoices, but
//     "invoice" would also allow invoices and invoice-archive. End each
//     prefix with a separator (- : . _) so it covers one name space only.
//   - name (optional): who uses the token, 1 to 64 characters of A-Z a-z
//     0-9 . _ - @ :, shown in the audit log instead of the token and the
//     key of the caller's rate limit and share of waiters. Default
//     "line-N", N the line number.
//
// Blank lines and lines starting with # are ignored. A token may appear
// once, and so may a name (given or by default): two tokens with one name
// would share one audit identity, one rate limit and one share of waiters.
//
// # What is guaranteed
//
// Requests to /locks, /locks/..., /rwlocks/..., /locksets/... and /semaphores/... need "Authorization:
// Bearer <token>"; a semaphore's or readers-writer lock's name is the resource its prefixes match,
// and a lock set (/locksets/a,b,c) needs the method allowed on every member.
// Without a known token they get 401 with WWW-Authenticate: Bearer; with a
// known token whose methods or prefixes do not cover the request they get
// 403. Both answers are application/problem+json bodies that never contain
// the token. Other paths (/livez, /healthz, /readyz, /openapi.yaml, /metrics, and
// the web page's static files under /ui/) are not guarded: they carry no
// lock state and no secrets; the page reads /locks with a token its user
// gives it.
//
// The presented token is compared with every token of the file, always all
// of them, as SHA-256 digests with crypto/subtle: the time taken does not
// depend on how much of the token matches, nor on which entry matches. The
// package never logs, and its errors name line numbers, never tokens.
package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lockgate/lockgate/api"
)

// Policy is a set of tokens and what each may do. It is immutable and safe
// for concurrent use.
type Policy struct {
	entries []entry
}

type entry struct {
	line     int
	name     string
	digest   [sha256.Size]byte
	methods  map[string]bool
	prefixes []string // nil: every resource
}

// ParseError reports a malformed token file line. It never contains the
// line's token.
type ParseError struct {
	Line   int
	Reason string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// ErrNoTokens is returned for a token file that holds no token: it would
// refuse every request.
var ErrNoTokens = errors.New("auth: the token file holds no token")

var (
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`)
	namePattern  = regexp.MustCompile(`^[A-Za-z0-9._@:-]{1,64}$`)
	// prefixPattern is the resource-name alphabet (lockcore.ValidResource).
	prefixPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)
	methodNames   = map[string]string{
		"GET": http.MethodGet, "PUT": http.MethodPut, "PATCH": http.MethodPatch, "DELETE": http.MethodDelete,
		"INSPECT": http.MethodGet, "ACQUIRE": http.MethodPut, "EXTEND": http.MethodPatch, "RELEASE": http.MethodDelete,
		opForce: opForce,
	}
)

// Load reads a token file (see the package doc).
//
// Errors: those of os.Open; *ParseError naming the first bad line;
// ErrNoTokens.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads a token file's contents (see the package doc).
//
// Errors: *ParseError naming the first bad line (a token or a name seen
// before included); ErrNoTokens; or the reader's error.
func Parse(r io.Reader) (*Policy, error) {
	p := &Policy{}
	seen := map[[sha256.Size]byte]int{}
	named := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 8192), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return &ParseError{Line: n, Reason: fmt.Sprintf(format, args...)}
		}
		f := strings.Fields(line)
		if len(f) != 3 && len(f) != 4 {
			return nil, bad("want 3 or 4 fields (token, methods, resource prefixes, optional name), found %d", len(f))
		}
		if len(f[0]) < 16 || len(f[0]) > 4096 || !tokenPattern.MatchString(f[0]) {
			return nil, bad("the token must be 16 to 4096 characters of A-Z a-z 0-9 - . _ ~ + / =")
		}
		e := entry{line: n, digest: sha256.Sum256([]byte(f[0])), methods: map[string]bool{}, name: fmt.Sprintf("line-%d", n)}
		if len(f) == 4 {
			if !namePattern.MatchString(f[3]) {
				return nil, bad("the name must be 1 to 64 characters of A-Z a-z 0-9 . _ - @ :")
			}
			e.name = f[3]
		}
		if first, dup := seen[e.digest]; dup {
			return nil, bad("the token of line %d again", first)
		}
		seen[e.digest] = n
		if first, dup := named[e.name]; dup {
			return nil, bad("the name %q of line %d again: each token needs a name of its own", e.name, first)
		}
		named[e.name] = n
		if f[1] == "*" {
			for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete} {
				e.methods[m] = true
			}
		} else {
			for _, m := range strings.Split(f[1], ",") {
				method, ok := methodNames[strings.ToUpper(m)]
				if !ok {
					return nil, bad("method %q is not GET, PUT, PATCH, DELETE (or inspect, acquire, extend, release), force or *", m)
				}
				e.methods[method] = true
			}
		}
		if f[2] != "*" {
			for _, pre := range strings.Split(f[2], ",") {
				if !prefixPattern.MatchString(pre) {
					return nil, bad("resource prefix %q must be 1 to 200 characters of A-Z a-z 0-9 . _ : - (or * alone for every resource)", pre)
				}
				e.prefixes = append(e.prefixes, pre)
			}
		}
		p.entries = append(p.entries, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, errors.New("auth: a line of the token file is over 64 KiB")
		}
		return nil, err
	}
	if len(p.entries) == 0 {
		return nil, ErrNoTokens
	}
	return p, nil
}

// Len is the number of tokens.
func (p *Policy) Len() int { return len(p.entries) }

// OpenPrefixes returns the prefixes that do not end with a separator
// (- : . _), each as "line N: prefix", in file order. Such a prefix is
// easy to grant wider than meant: "x" also covers xylophone, "tenant1"
// also covers tenant10-jobs. The file is valid with them; a caller may
// warn about them.
func (p *Policy) OpenPrefixes() []string {
	var out []string
	for _, e := range p.entries {
		for _, pre := range e.prefixes {
			if !strings.ContainsRune("-:._", rune(pre[len(pre)-1])) {
				out = append(out, fmt.Sprintf("line %d: %s", e.line, pre))
			}
		}
	}
	return out
}

// lookup returns the entry whose token is token, comparing token's digest
// with every entry's in constant time, or nil.
func (p *Policy) lookup(token string) *entry {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range p.entries {
		eq := subtle.ConstantTimeCompare(d[:], p.entries[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return nil
	}
	return &p.entries[found]
}

func (e *entry) allows(method, resource string) bool {
	if !e.methods[method] {
		return false
	}
	if e.prefixes == nil {
		return true
	}
	for _, pre := range e.prefixes {
		if strings.HasPrefix(resource, pre) {
			return true
		}
	}
	return false
}

// Middleware guards /locks, /locks/..., /rwlocks/..., /locksets/... and /semaphores/...: 401 without a known bearer token,
// 403 when the token does not allow the request's method on its resource (on
// every member of a lock set)
// (force for DELETE /locks/{resource}?force=..., GET on any prefix for the
// listing GET /locks, which the handler keeps within Grants).
// Other paths pass through. Put it before request validation, so that an
// unauthenticated client learns nothing from validation errors.
func (p *Policy) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, next) })
}

func (p *Policy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	resource, guarded := resourceOf(r.URL.Path)
	if !guarded {
		next.ServeHTTP(w, r)
		return
	}
	token, ok := bearer(r.Header)
	if !ok {
		deny(w, r, http.StatusUnauthorized, `Bearer realm="lockgate"`,
			"send Authorization: Bearer <token>")
		return
	}
	e := p.lookup(token)
	if e == nil {
		deny(w, r, http.StatusUnauthorized, `Bearer realm="lockgate", error="invalid_token"`,
			"the bearer token is not known")
		return
	}
	method, what := r.Method, r.Method+" "+r.URL.Path
	if r.Method == http.MethodDelete && ForceRequested(r) {
		method, what = opForce, "force-release "+resource
	}
	allowed := true
	for _, member := range membersOf(r.URL.Path, resource) {
		allowed = allowed && e.allows(method, member)
	}
	if r.URL.Path == "/locks" || r.URL.Path == "/locks/" {
		allowed = e.methods[method] // the listing is kept within Grants
	}
	if !allowed {
		deny(w, r, http.StatusForbidden, `Bearer realm="lockgate", error="insufficient_scope"`,
			"this token may not "+what)
		return
	}
	next.ServeHTTP(w, r)
}

// opForce is the force operation's key in entry.methods.
const opForce = "FORCE"

// ForceRequested reports whether a request asks for a force release: it has
// a force query parameter that is not false. A malformed value counts as
// asking, so that access control is never weaker than the handler, which
// refuses it.
func ForceRequested(r *http.Request) bool {
	q := r.URL.Query()
	if !q.Has("force") {
		return false
	}
	v, err := strconv.ParseBool(q.Get("force"))
	return err != nil || v
}

// Name returns the name of the request's bearer token (see the file format),
// or "" without a known one. It never returns the token.
func (p *Policy) Name(r *http.Request) string {
	token, ok := bearer(r.Header)
	if !ok {
		return ""
	}
	if e := p.lookup(token); e != nil {
		return e.name
	}
	return ""
}

// Grants returns the resource-name prefixes the request's bearer token may
// read (GET), for keeping a listing within them: all is true for a token
// allowed every resource. Without a known token, or for a token without
// GET, it returns no prefix and all false: nothing may be listed.
func (p *Policy) Grants(r *http.Request) (prefixes []string, all bool) {
	token, ok := bearer(r.Header)
	if !ok {
		return nil, false
	}
	e := p.lookup(token)
	if e == nil || !e.methods[http.MethodGet] {
		return nil, false
	}
	if e.prefixes == nil {
		return nil, true
	}
	return slices.Clone(e.prefixes), false
}

// membersOf returns the resources a guarded path acts on: each member of
// a lock set, /locksets/{a,b,c} (resource is "a,b,c"), every one of which
// the token must be allowed; resource alone for any other path.
func membersOf(path, resource string) []string {
	if strings.HasPrefix(path, "/locksets/") {
		return strings.Split(resource, api.SetSep)
	}
	return []string{resource}
}

// resourceOf returns the resource name of a /locks/{resource},
// /rwlocks/{resource}, /locksets/{resources} or /semaphores/{resource}/... path and whether the path is guarded. The name is taken from the decoded path, the
// way a prefix is written; a name with characters outside the resource
// alphabet is refused by request validation after this check.
func resourceOf(path string) (string, bool) {
	if rest, ok := strings.CutPrefix(path, "/locksets/"); ok {
		// A lock set's path lists its members; membersOf splits them.
		return strings.TrimSuffix(rest, "/"), true
	}
	if rest, ok := strings.CutPrefix(path, "/rwlocks/"); ok {
		// A readers-writer lock's name is its resource: PUT takes a
		// hold (either mode), PATCH and DELETE extend and release one,
		// GET reads it.
		return strings.TrimSuffix(rest, "/"), true
	}
	if rest, ok := strings.CutPrefix(path, "/semaphores/"); ok {
		// A semaphore's name is its resource; the methods are those of
		// its routes (PUT takes a permit, PATCH and DELETE extend and
		// give one back, GET reads it).
		name, _, _ := strings.Cut(rest, "/")
		return name, true
	}
	if path == "/locks" {
		return "", true
	}
	rest, ok := strings.CutPrefix(path, "/locks/")
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(rest, "/"), true
}

// bearer returns the token of a single "Authorization: Bearer <token>"
// header.
func bearer(h http.Header) (string, bool) {
	vals := h.Values("Authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func deny(w http.ResponseWriter, r *http.Request, status int, challenge, detail string) {
	p := api.Problem{Status: status, Detail: detail, Instance: r.URL.Path}
	if status == http.StatusUnauthorized {
		p.Type, p.Title = api.ProblemUnauthorized, "Unauthorized"
	} else {
		p.Type, p.Title = api.ProblemForbidden, "Forbidden"
	}
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", api.MediaProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
