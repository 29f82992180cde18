// Package ui is the gateway's read-only web page: who holds which lock,
// for how long, and the state of each lock node. It is plain HTML, CSS and
// JavaScript embedded in the binary (no CDN, no build step), which the
// handlers package serves at /ui/.
//
// The files hold no lock state and no secret. Everything the page shows it
// reads in the browser from gateway endpoints, polled every second:
// GET /locks (the listing, a page at a time, with the bearer token the
// user gives the page when access control is on; it never carries a lease
// id), GET /metrics (node states and names, waiters, the version) and,
// while a node does not serve, GET /readyz (when the gateway is not ready,
// why each node does not serve and until when). The page only reads: it
// sends no PUT, PATCH or DELETE.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// Files returns the page's files: index.html, app.js and app.css at the
// root. Their contents are fixed when the binary is built.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // "static" is embedded above: it exists
	}
	return sub
}
