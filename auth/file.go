package auth

import (
	"net/http"
	"sync/atomic"
)

// File is a token file that can be read again while the gateway runs (on
// SIGHUP, say). Each request is judged entirely by the policy in force when
// it arrived, so a reload never changes a request in flight; a file that
// does not parse is refused and the policy in force stays. It is safe for
// concurrent use.
type File struct {
	path string
	cur  atomic.Pointer[Policy]
}

// Open reads the token file at path (see the package doc).
//
// Errors: those of Load.
func Open(path string) (*File, error) {
	p, err := Load(path)
	if err != nil {
		return nil, err
	}
	f := &File{path: path}
	f.cur.Store(p)
	return f, nil
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Policy returns the policy in force.
func (f *File) Policy() *Policy { return f.cur.Load() }

// Reload reads the file again and, if it parses, puts it in force for the
// requests that arrive from then on. On error the policy in force is kept.
//
// Errors: those of Load (which name line numbers, never tokens).
func (f *File) Reload() (*Policy, error) {
	p, err := Load(f.path)
	if err != nil {
		return nil, err
	}
	f.cur.Store(p)
	return p, nil
}

// Middleware is Policy.Middleware with the policy in force when each request
// arrives.
func (f *File) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.cur.Load().serve(w, r, next) })
}

// Name is Policy.Name with the policy in force.
func (f *File) Name(r *http.Request) string { return f.cur.Load().Name(r) }

// Grants is Policy.Grants with the policy in force.
func (f *File) Grants(r *http.Request) (prefixes []string, all bool) { return f.cur.Load().Grants(r) }
