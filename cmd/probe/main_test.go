package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/freeport"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusOK)
		case "/slow":
			time.Sleep(500 * time.Millisecond)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	closed := "http://" + freeport.Addr(t) + "/"

	tests := []struct {
		name string
		args []string
		code int
	}{
		{"a 2xx answer is healthy", []string{srv.URL + "/ok"}, 0},
		{"a 503 answer is unhealthy", []string{srv.URL + "/readyz"}, 1},
		{"no answer within the timeout is unhealthy", []string{"-timeout", "50ms", srv.URL + "/slow"}, 1},
		{"a closed port is unhealthy", []string{closed}, 1},
		{"no URL is a usage error", nil, 2},
		{"a bad URL is a usage error", []string{"::bad"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(tt.args, io.Discard); got != tt.code {
				t.Errorf("run(%q) = %d, want %d", tt.args, got, tt.code)
			}
		})
	}
}
