package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/lockgate/lockgate/api"
	"github.com/lockgate/lockgate/handlers"
	"github.com/lockgate/lockgate/lockcore"
	"github.com/lockgate/lockgate/lockcore/watch"
)

func init() {
	// The contract declares the stream as a string; kin-openapi reads it
	// as one with the file decoder.
	openapi3filter.RegisterBodyDecoder(api.MediaEventStream, openapi3filter.FileBodyDecoder)
}

// watchGateway is a gateway over three in-memory nodes with its watch hub
// given, so that tests can see its watchers.
func watchGateway(t *testing.T, opts *watch.Options, hopts *handlers.Options) (*gateway, *watch.Hub) {
	t.Helper()
	return hubGateway(t, memNodes(3, nil), nil, opts, hopts)
}

// hubGateway is a gateway over nodes with Redlock options core, a watch
// hub of its own (wopts), and handler options hopts; closed when t ends.
func hubGateway(t *testing.T, nodes []lockcore.Node, core *lockcore.Options, wopts *watch.Options, hopts *handlers.Options) (*gateway, *watch.Hub) {
	t.Helper()
	rl, err := lockcore.New(nodes, core)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	hub := watch.New(rl, wopts)
	t.Cleanup(hub.Close)
	var o handlers.Options
	if hopts != nil {
		o = *hopts
	}
	o.Watch = hub
	h, err := handlers.New(rl, &o)
	if err != nil {
		t.Fatal(err)
	}
	return &gateway{handler: h, locker: rl}, hub
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

func TestLongPollAnswersWhenTheHolderChanges(t *testing.T) {
	g, hub := watchGateway(t, nil, nil)
	srv := g.serve(t, nil)
	ctx := context.Background()
	l := g.acquire(t, "job", "", `{"owner":"w1"}`)

	// A token other than the holder's: at once, as a plain GET.
	target := "/locks/job?after=0&wait_ms=60000"
	a := await(t, sendAsync(ctx, srv, GET, target, ""), 10*time.Second, "long poll after 0")
	checkContract(t, GET, target, a.res)
	if a.res.Status != http.StatusOK || a.res.Header.Get("ETag") != `"`+strconv.FormatInt(l.FencingToken, 10)+`"` {
		t.Fatalf("long poll after 0: %s", a.res)
	}

	// The holder's token: until the lock changes.
	target = "/locks/job?after=" + strconv.FormatInt(l.FencingToken, 10) + "&wait_ms=60000"
	ch := sendAsync(ctx, srv, GET, target, "")
	waitUntil(t, "the long poll watches", func() bool { return hub.Watchers() == 1 })
	res := g.do(t, DELETE, "/locks/job", "", api.HeaderLeaseID, l.LeaseID)
	if res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}
	a = await(t, ch, 10*time.Second, "long poll on the holder's token")
	checkContract(t, GET, target, a.res)
	wantProblem(t, a.res, http.StatusNotFound, api.ProblemNotHeld)

	// Nothing changes before wait_ms ends: the state then (free).
	target = "/locks/job?after=0&wait_ms=20"
	wantProblem(t, g.do(t, GET, target, ""), http.StatusNotFound, api.ProblemNotHeld)
	// HEAD takes the same parameters.
	if res := g.do(t, http.MethodHead, target, ""); res.Status != http.StatusNotFound {
		t.Fatalf("HEAD long poll: %s", res)
	}
	if hub.Watchers() != 0 {
		t.Fatalf("%d watchers left after the polls", hub.Watchers())
	}
}

func TestLongPollParametersAreChecked(t *testing.T) {
	g, _ := watchGateway(t, nil, nil)
	for _, target := range []string{
		"/locks/job?after=-1&wait_ms=10",
		"/locks/job?after=0&wait_ms=300001",
		"/locks/job?after=x&wait_ms=10",
	} {
		wantProblem(t, g.do(t, GET, target, ""), http.StatusBadRequest, api.ProblemInvalid)
	}
}

func TestWatchersOverTheReplicasBoundGet429(t *testing.T) {
	g, hub := watchGateway(t, &watch.Options{MaxWatchers: 1}, nil)
	srv := g.serve(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch := sendAsync(ctx, srv, GET, "/locks/job?after=0&wait_ms=60000", "")
	waitUntil(t, "the first long poll watches", func() bool { return hub.Watchers() == 1 })
	target := "/locks/other?after=0&wait_ms=60000"
	res := g.do(t, GET, target, "")
	wantProblem(t, res, http.StatusTooManyRequests, api.ProblemTooManyWatchers)
	if res.Header.Get(api.HeaderRetryAfter) == "" {
		t.Error("429 without Retry-After")
	}
	res = g.do(t, GET, "/locks/other", "", "Accept", api.MediaEventStream)
	wantProblem(t, res, http.StatusTooManyRequests, api.ProblemTooManyWatchers)
	cancel()
	<-ch
}

// sseEvent is one Server-Sent Event as read.
type sseEvent struct {
	name, id string
	data     api.WatchEvent
}

// readEvents reads SSE events from r onto the channel until r ends,
// skipping comments; raw gets every line.
func readEvents(r *bufio.Reader, out chan<- sseEvent, errs chan<- error) {
	defer close(out)
	var ev sseEvent
	var data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			errs <- err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				if err := json.Unmarshal([]byte(data), &ev.data); err != nil {
					errs <- err
					return
				}
				out <- ev
			}
			ev, data = sseEvent{}, ""
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		default:
			errs <- errors.New("unexpected line " + strconv.Quote(line))
			return
		}
	}
}

func nextEvent(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

func wantEvent(t *testing.T, ev sseEvent, name string, token int64) {
	t.Helper()
	if ev.name != name || ev.data.FencingToken != token || ev.id != strconv.FormatInt(token, 10) {
		t.Fatalf("event %s id %s %+v, want %s with token %d", ev.name, ev.id, ev.data, name, token)
	}
}

func TestStreamSeesAcquiredReleasedExpiredInTokenOrder(t *testing.T) {
	// No poll: every event must come from this replica's own changes,
	// the nodes' announcements or the TTL.
	g, _ := watchGateway(t, &watch.Options{Poll: time.Hour}, nil)
	srv := g.serve(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, GET, srv.URL+"/locks/job", nil)
	req.Header.Set("Accept", api.MediaEventStream)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	checkContract(t, GET, "/locks/job", response{Status: resp.StatusCode, Header: resp.Header, Body: []byte("")})
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != api.MediaEventStream {
		t.Fatalf("stream answered %d %s", resp.StatusCode, ct)
	}
	events, errs := make(chan sseEvent, 16), make(chan error, 1)
	go readEvents(bufio.NewReader(resp.Body), events, errs)

	wantEvent(t, nextEvent(t, events), "state", 0)
	l1 := g.acquire(t, "job", "", `{"owner":"w1"}`)
	ev := nextEvent(t, events)
	wantEvent(t, ev, "acquired", l1.FencingToken)
	if ev.data.Owner != "w1" || !ev.data.Held || ev.data.ExpiresAt == nil {
		t.Fatalf("acquired event %+v: want owner w1, held, expires_at", ev.data)
	}
	if res := g.do(t, DELETE, "/locks/job", "", api.HeaderLeaseID, l1.LeaseID); res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}
	wantEvent(t, nextEvent(t, events), "released", l1.FencingToken)
	l2 := g.acquire(t, "job", "", `{"ttl_ms":200}`)
	wantEvent(t, nextEvent(t, events), "acquired", l2.FencingToken)
	wantEvent(t, nextEvent(t, events), "expired", l2.FencingToken)
	if l2.FencingToken <= l1.FencingToken {
		t.Fatalf("tokens %d then %d", l1.FencingToken, l2.FencingToken)
	}
	select {
	case err := <-errs:
		t.Fatalf("stream: %v", err)
	default:
	}
}

func TestStreamNeverCarriesTheLeaseID(t *testing.T) {
	g, _ := watchGateway(t, nil, nil)
	srv := g.serve(t, nil)
	l := g.acquire(t, "job", "", "")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, GET, srv.URL+"/locks/job", nil)
	req.Header.Set("Accept", "text/html, "+api.MediaEventStream+";q=0.9")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	var all strings.Builder
	for !strings.Contains(all.String(), "\n\n") {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(line)
	}
	cancel()
	resp.Body.Close()
	if !strings.Contains(all.String(), "event: state") || strings.Contains(all.String(), l.LeaseID) {
		t.Fatalf("first event %q: want a state without the lease id", all.String())
	}
}

func TestAnIdleStreamEnds(t *testing.T) {
	g, hub := watchGateway(t, nil, &handlers.Options{StreamIdle: 50 * time.Millisecond, StreamHeartbeat: 10 * time.Millisecond})
	srv := g.serve(t, nil)
	req, _ := http.NewRequest(GET, srv.URL+"/locks/job", nil)
	req.Header.Set("Accept", api.MediaEventStream)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	b := make([]byte, 512)
	for {
		n, err := resp.Body.Read(b)
		body.Write(b[:n])
		if err != nil {
			break // the server ended the stream
		}
	}
	if !strings.Contains(body.String(), ": heartbeat\n\n") {
		t.Fatalf("stream %q: no heartbeat before it ended", body.String())
	}
	waitUntil(t, "the stream's watcher leaves", func() bool { return hub.Watchers() == 0 })
}

// openStream opens an event stream on target and returns its events.
func openStream(t *testing.T, srv interface{ Client() *http.Client }, url, target string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, GET, url+target, nil)
	req.Header.Set("Accept", api.MediaEventStream)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	checkContract(t, GET, target, response{Status: resp.StatusCode, Header: resp.Header, Body: []byte("")})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %s answered %d", target, resp.StatusCode)
	}
	events, errs := make(chan sseEvent, 16), make(chan error, 1)
	go readEvents(bufio.NewReader(resp.Body), events, errs)
	return events, func() { cancel(); resp.Body.Close() }
}

func TestAPrefixStreamFollowsTheLocksUnderIt(t *testing.T) {
	g, _ := watchGateway(t, &watch.Options{Poll: time.Hour}, nil)
	srv := g.serve(t, nil)
	j1 := g.acquire(t, "jobs.1", "", "")
	events, stop := openStream(t, srv, srv.URL, "/locks?prefix=jobs.")
	defer stop()
	ev := nextEvent(t, events)
	wantEvent(t, ev, "state", j1.FencingToken)
	if ev.data.Resource != "jobs.1" {
		t.Fatalf("state of %s, want jobs.1", ev.data.Resource)
	}
	g.acquire(t, "other", "", "") // not under the prefix
	j2 := g.acquire(t, "jobs.2", "", "")
	ev = nextEvent(t, events) // this replica took it: found at once
	wantEvent(t, ev, "acquired", j2.FencingToken)
	if ev.data.Resource != "jobs.2" {
		t.Fatalf("acquired %s, want jobs.2", ev.data.Resource)
	}
	if res := g.do(t, DELETE, "/locks/jobs.1", "", api.HeaderLeaseID, j1.LeaseID); res.Status != http.StatusNoContent {
		t.Fatalf("release: %s", res)
	}
	wantEvent(t, nextEvent(t, events), "released", j1.FencingToken)
}

func TestAPrefixStreamStaysWithinTheGrants(t *testing.T) {
	grants := func(*http.Request) ([]string, bool) { return []string{"team-a."}, false }
	g, _ := watchGateway(t, nil, &handlers.Options{Grants: grants})
	for _, target := range []string{"/locks?prefix=", "/locks?prefix=team-b.", "/locks?prefix=team"} {
		res := g.do(t, GET, target, "", "Accept", api.MediaEventStream)
		wantProblem(t, res, http.StatusForbidden, api.ProblemForbidden)
	}
	srv := g.serve(t, nil)
	events, stop := openStream(t, srv, srv.URL, "/locks?prefix=team-a.x")
	defer stop()
	g.acquire(t, "team-a.x1", "", "")
	// The stream's first listing runs after its headers are sent, so it
	// may already find the lock: then it comes as its state, else as
	// acquired. Either way it is the lock under the granted prefix.
	ev := nextEvent(t, events)
	if ev.name == "state" && ev.data.Held {
		ev.name = "acquired"
	}
	wantEvent(t, ev, "acquired", nextTokenOf(t, g, "team-a.x1"))
	if ev.data.Resource != "team-a.x1" {
		t.Fatalf("event for %s, want team-a.x1", ev.data.Resource)
	}
}

// nextTokenOf returns the token resource is held with.
func nextTokenOf(t *testing.T, g *gateway, resource string) int64 {
	t.Helper()
	info, err := g.locker.Inspect(context.Background(), resource)
	if err != nil {
		t.Fatal(err)
	}
	return info.Token
}

// smallBuffers accepts connections whose kernel send buffer is small, so
// that a client that stops reading stops the server's writes soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func TestAStreamThatIsNotReadIsDropped(t *testing.T) {
	g, hub := watchGateway(t, &watch.Options{Poll: time.Hour}, nil)
	srv := httptest.NewUnstartedServer(g.handler)
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, GET, srv.URL+"/locks/job", nil)
	req.Header.Set("Accept", api.MediaEventStream)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitUntil(t, "the stream watches", func() bool { return hub.Watchers() == 1 })
	// A client that reads keeps up and stays.
	events, stop := openStream(t, srv, srv.URL, "/locks/job")
	defer stop()
	go func() {
		for range events {
		}
	}()
	waitUntil(t, "the reader watches", func() bool { return hub.Watchers() == 2 })
	// The first client reads nothing more. Each pair is two events of about
	// 200 bytes; the socket buffers hold some tens of kilobytes, the
	// subscription 16 events: well before 5000 pairs the stream is
	// dropped instead of buffered.
	rctx := context.Background()
	pairs := 0
	for ; hub.Dropped() == 0; pairs++ {
		if pairs == 5000 {
			t.Fatalf("not dropped after %d events sent", hub.EventsSent())
		}
		l, err := g.locker.Acquire(rctx, lockcore.AcquireRequest{Resource: "job", TTL: time.Hour, Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		hub.Changed("job", watch.Acquired)
		if err := g.locker.Release(rctx, lockcore.ReleaseRequest{Resource: "job", LeaseID: l.ID}); err != nil {
			t.Fatal(err)
		}
		if pairs%50 == 49 { // let the tracker catch up with the changes
			waitUntil(t, "the tracker reads", func() bool { return hub.EventsSent() > 0 })
			time.Sleep(time.Millisecond)
		}
	}
	waitUntil(t, "the dropped stream's watcher leaves", func() bool { return hub.Watchers() == 1 })
	if hub.Dropped() != 1 {
		t.Fatalf("%d streams dropped, want only the one that does not read", hub.Dropped())
	}
	t.Logf("dropped after %d pairs, %d events sent", pairs, hub.EventsSent())
}
