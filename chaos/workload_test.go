package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/fencing"
)

// ForceRaceEnv, set to 0, keeps force releases apart from the acquires of
// their resource: a force release then waits for the acquires of its
// resource in flight, and holds new ones back, until it is answered, and
// is not sent within forceQuiet of an acquire of its resource whose answer
// was lost. By default they race, as an operator's would: rules FR1–FR4
// of lockcore/doc.go make a force release safe against a grant of the
// broken lease made before it, during it, or by a call still under way
// after it (RELIABILITY.md's bug 15 was what racing them found before).
// The holders' extends, releases and writes race it either way.
const ForceRaceEnv = "LOCKGATE_CHAOS_FORCE_RACE"

// forceQuiet is how long after an acquire's lost answer a force release
// of its resource waits: the gateways' largest wait (-max-wait 5s) bounds
// how long a request they took keeps acting.
const forceQuiet = 5 * time.Second

// workload is the clients' side of a run.
type workload struct {
	rec  *Recorder
	reg  *Register
	cl   *cluster
	http *http.Client
	ttl  time.Duration
	hot  []string
	cold []string
	sems []string // semaphores of workloadK permits
	// forcing[i] keeps a force release of hot[i] apart from its acquires
	// in flight (see ForceRaceEnv), unless forceRace (the default).
	forcing   []sync.RWMutex
	forceRace bool
	// lostAt[i] is when an acquire of hot[i] last ended without an answer
	// (run time, ns; 0: never).
	lostAt []atomic.Int64
	seed   uint64
	think  time.Duration // mean pause between two cycles of one client

	// pauseReq[i] asks client i to stall past its TTL between its next grant
	// and the write; it reports the stall on pauseDone.
	pauseReq  []atomic.Bool
	pauseDone chan Fault
	leaseSeq  atomic.Uint64
}

func newWorkload(rec *Recorder, cl *cluster, clients int, seed uint64, ttl time.Duration) *workload {
	w := &workload{rec: rec, reg: NewRegister(), cl: cl, ttl: ttl, seed: seed, think: 120 * time.Millisecond,
		pauseReq: make([]atomic.Bool, clients), pauseDone: make(chan Fault, clients+1)}
	w.http = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: 300 * time.Millisecond}).DialContext}}
	for i := range 3 {
		w.hot = append(w.hot, fmt.Sprintf("hot-%d", i))
	}
	for i := range 64 {
		w.cold = append(w.cold, fmt.Sprintf("cold-%02d", i))
	}
	w.sems = []string{"sem-0", "sem-1"}
	w.forcing = make([]sync.RWMutex, len(w.hot))
	w.lostAt = make([]atomic.Int64, len(w.hot))
	w.forceRace = os.Getenv(ForceRaceEnv) != "0"
	return w
}

// lockReply is the part of a lock's or a permit's answer the clients use.
type lockReply struct {
	FencingToken uint64 `json:"fencing_token"`
	ValidityMs   int64  `json:"validity_ms"`
	Permit       int    `json:"permit"`
}

// call sends one lock request and records it. The returned event carries
// the outcome; for an answered acquire or extend, the token and validity.
func (w *workload) call(ctx context.Context, client, gw int, op Op, res, lease, body string) Event {
	return w.send(ctx, client, gw, op, res, lease, body, false, false)
}

// send is call with the marks of a foreign lease.
func (w *workload) send(ctx context.Context, client, gw int, op Op, res, lease, body string, foreign, never bool) Event {
	return w.request(ctx, Event{Client: client, Op: op, Resource: res, Lease: lease, Gateway: gw, Foreign: foreign,
		NeverGranted: never}, body)
}

// request sends e's operation (Op, Resource, Lease, Gateway; Permit and
// Permits for a permit's) with body, completes e from the answer and
// records it: the lock routes for OpAcquire, OpExtend and OpRelease, the
// force release (the operator's token, no Lease-Id) for OpForceRelease,
// the semaphore routes for the permit operations.
func (w *workload) request(ctx context.Context, e Event, body string) Event {
	base := w.cl.gws[e.Gateway].base()
	method, url, bearer := "", base+"/locks/"+e.Resource, w.cl.clientToken
	switch e.Op {
	case OpAcquire:
		method = http.MethodPut
	case OpExtend:
		method = http.MethodPatch
	case OpRelease:
		method = http.MethodDelete
	case OpForceRelease:
		method, url, bearer = http.MethodDelete, url+"?force=true", w.cl.operatorToken
	case OpPermitAcquire:
		method, url = http.MethodPut, base+"/semaphores/"+e.Resource+"/permits"
	case OpPermitExtend, OpPermitRelease:
		method = map[Op]string{OpPermitExtend: http.MethodPatch, OpPermitRelease: http.MethodDelete}[e.Op]
		url = fmt.Sprintf("%s/semaphores/%s/permits/%d", base, e.Resource, e.Permit)
	default:
		panic(fmt.Sprintf("chaos: no route for %v", e.Op)) // the inputs are the test's own
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), method, url, strings.NewReader(body))
	if err != nil {
		panic(err) // the inputs are the test's own
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if e.Lease != "" {
		req.Header.Set("Lease-Id", e.Lease)
	} else if e.Op == OpAcquire || e.Op == OpPermitAcquire {
		e.Minted = true // the gateway mints the lease
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		var in struct {
			TTLMs int64 `json:"ttl_ms"`
		}
		if json.Unmarshal([]byte(body), &in) == nil {
			e.TTL = time.Duration(in.TTLMs) * time.Millisecond
		}
	}
	e.Invoke = w.rec.Now()
	resp, err := w.http.Do(req)
	if err != nil {
		e.Complete = w.rec.Now()
		e.Outcome = Unknown
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			e.Outcome = Fail // the request never left the client
		}
		w.rec.Add(e)
		return e
	}
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	e.Complete = w.rec.Now()
	e.Status = resp.StatusCode
	switch {
	case rerr != nil:
		e.Outcome = Unknown
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		e.Outcome = Ok
		if e.Op == OpAcquire || e.Op == OpExtend || e.Op == OpPermitAcquire || e.Op == OpPermitExtend {
			var r lockReply
			if json.Unmarshal(data, &r) != nil || r.FencingToken == 0 {
				e.Outcome = Unknown
			}
			e.Token, e.ValidFor = r.FencingToken, time.Duration(r.ValidityMs)*time.Millisecond
			if e.Op == OpPermitAcquire {
				e.Permit = r.Permit
				if r.Permit < 0 || r.Permit >= e.Permits {
					e.Permit = e.Permits // a permit out of range: the semaphore model rejects it (S1)
				}
			}
		}
		if e.Minted {
			// The lease the gateway minted. An answer without one is a
			// broken contract: TestFaults fails on it (see mintedWithoutLease).
			e.Lease = resp.Header.Get("Lease-Id")
			if e.Lease == "" {
				e.Outcome = Unknown
			}
		}
	case resp.StatusCode >= 400 && resp.StatusCode < 500, resp.StatusCode == http.StatusServiceUnavailable:
		e.Outcome = Fail
	default:
		e.Outcome = Unknown // a 5xx other than 503 is itself worth a look: see summary
	}
	if e.Op == OpPermitAcquire && e.Outcome != Ok {
		e.Permit = -1 // no answer named one
	}
	w.rec.Add(e)
	return e
}

// write stores a value carrying token in the fenced register and records it.
func (w *workload) write(ctx context.Context, client int, res, lease string, token uint64) {
	value := fmt.Sprintf("%s@%d#%d", lease, token, w.leaseSeq.Add(1))
	e := Event{Client: client, Op: OpWrite, Resource: res, Lease: lease, Token: token, Value: value, Gateway: -1}
	e.Invoke = w.rec.Now()
	err := w.reg.Write(ctx, res, lease, token, value, e.Invoke)
	e.Complete = w.rec.Now()
	switch {
	case err == nil:
		e.Outcome = Ok
	case errors.Is(err, fencing.ErrStaleToken):
		e.Outcome, e.Stale = Fail, true
	default:
		e.Outcome = Fail // never made: the run's end cancelled it (not Stale)
	}
	w.rec.Add(e)
}

// newLease is a fresh client-chosen lease id, unique over the run.
func (w *workload) newLease(client int, rng *rand.Rand) string {
	return fmt.Sprintf("c%02d-%07d-%016x", client+1, w.leaseSeq.Add(1), rng.Uint64())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// client runs one client's loop until ctx ends or maxCycles is reached.
func (w *workload) client(ctx context.Context, id, maxCycles int) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(id)+1))
	ttlMs := w.ttl.Milliseconds()
	for cycle := 0; cycle < maxCycles && ctx.Err() == nil; cycle++ {
		if !sleepCtx(ctx, time.Duration(rng.Int64N(int64(2*w.think)))) {
			return
		}
		if rng.IntN(forceEvery) == 0 {
			h, gw := rng.IntN(len(w.hot)), rng.IntN(len(w.cl.gws))
			if w.forceRace {
				w.request(ctx, Event{Client: id, Op: OpForceRelease, Resource: w.hot[h], Gateway: gw}, "")
				continue
			}
			w.forcing[h].Lock()
			// Not while an acquire of it may still be under way in a gateway.
			if at := w.lostAt[h].Load(); at == 0 || w.rec.Now()-time.Duration(at) >= forceQuiet {
				w.request(ctx, Event{Client: id, Op: OpForceRelease, Resource: w.hot[h], Gateway: gw}, "")
			}
			w.forcing[h].Unlock()
			continue
		}
		if rng.IntN(permitEvery) == 0 {
			w.permitCycle(ctx, id, rng)
			continue
		}
		res, hot := w.cold[rng.IntN(len(w.cold))], -1
		wait := 0
		if rng.IntN(100) < 60 {
			hot = rng.IntN(len(w.hot))
			res = w.hot[hot]
			if rng.IntN(3) == 0 {
				wait = 300
			}
		}
		gw := rng.IntN(len(w.cl.gws))
		// Half the cycles choose their lease id, as a client that retries
		// an acquire does; the others let the gateway mint it, as curl
		// users do (lockcore's rules for late grants differ between the
		// two: see lockcore/doc.go).
		lease := ""
		if rng.IntN(2) == 0 {
			lease = w.newLease(id, rng)
		}
		if hot >= 0 && !w.forceRace {
			w.forcing[hot].RLock()
		}
		a := w.call(ctx, id, gw, OpAcquire, res, lease, fmt.Sprintf(`{"ttl_ms":%d,"wait_ms":%d}`, ttlMs, wait))
		if hot >= 0 && !w.forceRace {
			if a.Outcome == Unknown {
				w.lostAt[hot].Store(int64(a.Complete))
			}
			w.forcing[hot].RUnlock()
		}
		if a.Outcome != Ok {
			continue
		}
		lease = a.Lease
		paused := false
		if w.pauseReq[id].Swap(false) {
			f := Fault{Kind: "client-pause", Target: fmt.Sprintf("client %d", id), Start: w.rec.Now()}
			time.Sleep(w.ttl*5/2 + 100*time.Millisecond) // past the TTL, whatever ctx says
			f.End = w.rec.Now()
			w.pauseDone <- f // buffered for every client: never blocks
			paused = true
		}
		w.write(ctx, id, res, lease, a.Token)
		if !paused && rng.IntN(4) == 0 {
			x := w.call(ctx, id, gw, OpExtend, res, lease, fmt.Sprintf(`{"ttl_ms":%d}`, ttlMs))
			if x.Outcome == Ok {
				w.write(ctx, id, res, lease, x.Token)
			}
		}
		sleepCtx(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
		w.call(ctx, id, gw, OpRelease, res, lease, "")
		switch n := rng.IntN(16); {
		case n < 2: // the released lease tries again, on any replica
			w.foreign(ctx, id, rng, res, lease)
		case n == 2: // a lease nobody was ever given
			w.foreign(ctx, id, rng, res, w.newLease(id, rng)+"-x")
		}
	}
}

// permitCycle takes a permit of a semaphore (a lease of the client's own
// or minted), writes to the fenced register under the permit's key with
// its token, sometimes extends it (and writes again), and releases it, or
// in one cycle of ten leaves it to expire, as a holder that died.
func (w *workload) permitCycle(ctx context.Context, id int, rng *rand.Rand) {
	ttlMs := w.ttl.Milliseconds()
	sem, gw, lease, wait := w.sems[rng.IntN(len(w.sems))], rng.IntN(len(w.cl.gws)), "", 0
	if rng.IntN(2) == 0 {
		lease = w.newLease(id, rng)
	}
	if rng.IntN(3) == 0 {
		wait = 300
	}
	e := Event{Client: id, Op: OpPermitAcquire, Resource: sem, Lease: lease, Gateway: gw, Permits: workloadK}
	a := w.request(ctx, e, fmt.Sprintf(`{"permits":%d,"ttl_ms":%d,"wait_ms":%d}`, workloadK, ttlMs, wait))
	if a.Outcome != Ok {
		return
	}
	key := fmt.Sprintf("%s-permit-%d", sem, a.Permit) // the fence is per permit
	w.write(ctx, id, key, a.Lease, a.Token)
	e.Lease, e.Permit = a.Lease, a.Permit
	if rng.IntN(4) == 0 {
		e.Op = OpPermitExtend
		if x := w.request(ctx, e, fmt.Sprintf(`{"ttl_ms":%d}`, ttlMs)); x.Outcome == Ok {
			w.write(ctx, id, key, a.Lease, x.Token)
		}
	}
	if rng.IntN(10) == 0 {
		return // dies holding the permit
	}
	sleepCtx(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
	e.Op = OpPermitRelease
	w.request(ctx, e, "")
}

// foreign sends an extend or a release with a lease that is not the
// client's live grant, and marks it for C5.
func (w *workload) foreign(ctx context.Context, id int, rng *rand.Rand, res, lease string) Event {
	op, body := OpRelease, ""
	if rng.IntN(2) == 0 {
		op, body = OpExtend, fmt.Sprintf(`{"ttl_ms":%d}`, w.ttl.Milliseconds())
	}
	return w.send(ctx, id, rng.IntN(len(w.cl.gws)), op, res, lease, body, true, strings.HasSuffix(lease, "-x"))
}

// run starts n clients and waits for them.
func (w *workload) run(ctx context.Context, n, maxCycles int) {
	var wg sync.WaitGroup
	for id := range n {
		wg.Go(func() { w.client(ctx, id, maxCycles) })
	}
	wg.Wait()
}
