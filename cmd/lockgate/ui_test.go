package main

import (
	"net/http"
	"testing"
)

// The page is on by default and -ui=false turns it off.
func TestUISetting(t *testing.T) {
	on := startGateway(t, nil, nil)
	if a := on.do(t, http.MethodGet, "/ui/", ""); a.status != http.StatusOK {
		t.Errorf("default: GET /ui/ %d, want 200", a.status)
	}
	off := startGateway(t, []string{"-ui=false"}, nil)
	for _, p := range []string{"/ui", "/ui/", "/ui/app.js"} {
		if a := off.do(t, http.MethodGet, p, ""); a.status != http.StatusNotFound {
			t.Errorf("-ui=false: GET %s %d, want 404", p, a.status)
		}
	}
}
