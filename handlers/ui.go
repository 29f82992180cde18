package handlers

import (
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// uiPolicy is the page's Content-Security-Policy: its own files only, no
// inline script or style, no frames, requests to this gateway only.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiTypes are the media types of the files the page is made of.
var uiTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// serveUI serves the files of files at /ui/{name} (index.html at /ui/),
// and redirects /ui to /ui/ so that the page's relative links resolve.
// A name that is not a file of files, or a directory, gets the 404
// problem. The files are static: they hold no lock state and no secret, so
// they need no token; what the page shows it fetches from /locks,
// /semaphores/{name}, /metrics and /readyz, which are guarded as always.
//
// The answer is always the whole file with 200: no Range (206, 416) and no
// conditional requests (304), which the contract would have to list for a
// few kilobytes saved.
func serveUI(files fs.FS) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
			return
		}
		name := chi.URLParam(r, "*")
		if name == "" {
			name = "index.html"
		}
		ctype, known := uiTypes[path.Ext(name)]
		if !known || strings.Contains(name, "/") || !fs.ValidPath(name) {
			notFound(w, r)
			return
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			notFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		setOutcome(r, "ok")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}
