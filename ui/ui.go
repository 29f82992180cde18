// Package ui is the gateway's read-only web page: who holds which lock,
// for how long, and the state of each lock node. It is plain HTML, CSS and
// JavaScript embedded in the binary (no CDN, no build step), which the
// handlers package serves at /ui/.
//
// The files hold no lock state and no secret. Everything the page shows it
// reads in the browser from gateway endpoints, polled every second:
// GET /locks (the listing, a page at a time, with the bearer token the
// user gives the page when access control is on; it never carries a lease
// id), GET /metrics (node states and names, waiters, the version), GET
// /readyz (each node's state, since when, why it does not serve and until
// when) and GET /semaphores/{name} for the semaphores the user names (the
// gateway has no listing of them). When a refresh of the listing fails the
// page keeps the locks it last listed, marked with their age and why the
// refresh failed. The page only reads: it sends no PUT, PATCH or DELETE.
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
