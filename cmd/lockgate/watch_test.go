package main

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/internal/testlog"
)

// An open event stream does not hold the shutdown: the gateway ends it,
// and -max-watchers bounds the streams with a 429 meanwhile.
func TestAnEventStreamEndsAtShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &testlog.Buffer{}
	addrc, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-max-watchers", "1", "-shutdown-delay", "0s"}, envOf(nil), log, func(a string) { addrc <- a })
	}()
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("the gateway did not start: %v\n%s", err, log)
	}
	g := &gateway{base: base, log: log}

	req, _ := http.NewRequest(http.MethodGet, base+"/locks/job", nil)
	req.Header.Set("Accept", api.MediaEventStream)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: state\n" {
		t.Fatalf("first line %q, %v; want the state event", line, err)
	}
	if a := g.do(t, http.MethodGet, "/locks/other", "", "Accept", api.MediaEventStream); a.status != http.StatusTooManyRequests ||
		!strings.Contains(a.body, api.ProblemTooManyWatchers) {
		t.Fatalf("a second stream over -max-watchers 1: %d %s", a.status, a.body)
	}
	if !strings.Contains(g.do(t, http.MethodGet, "/metrics", "").body, "\nlockgate_watchers 1\n") {
		t.Fatal("/metrics does not show the open stream in lockgate_watchers")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v (the stream held the shutdown)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not stop within 30s")
	}
}
