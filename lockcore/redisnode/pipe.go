package redisnode

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pipe shares round trips among concurrent lock calls to one node. At
// most pipeWorkers round trips are in flight at once (one slot each). A call
// that finds a slot free is sent at once by its own goroutine, alone, with
// no pipeline; otherwise it waits in the pipe, and a worker sends the
// calls waiting there as one pipeline as soon as a slot frees (see
// pipe.work). go-redis's AutoPipeline batches too, but a command once queued
// there waits regardless of its caller's deadline, and lockcore needs every
// node call to end by its deadline.
//
// Why a call sends itself when it can, rather than always through a worker:
// the hand-off to a worker and back is two goroutine wake-ups, which about
// doubles the time of a lone acquire and release on one node, while
// pipelines pay off only when calls wait anyway.
const (
	// pipeWorkers is how many round trips (a call alone or a pipeline) one
	// node may have in flight at once, and how many workers send
	// pipelines. One: every call that arrives while a round trip is in
	// flight joins the next pipeline, sent as soon as it returns, so a
	// node costs one write and one read per round trip however many calls
	// wait (up to maxBatch per round trip). More round trips in flight
	// only split the waiting calls into smaller batches on more
	// connections, and lower the throughput under load; a lone call
	// always finds the slot free. A slow node delays only its own calls,
	// and a call answered by a quorum does not wait for it (package
	// lockcore).
	//
	// A slow node's calls do queue behind its slow round trips: with its
	// replies 30 ms late, it serves at most maxBatch calls per 30 ms, and
	// under load most of its calls end unsent at the node timeout (it then
	// counts for less while slow). Letting more round trips be in flight
	// once the newest has been out for a while does not keep more of the
	// throughput with a slow node, and costs healthy nodes under load,
	// whose round trips outlast that while too.
	pipeWorkers = 1
	// maxBatch caps the calls of one pipeline: 64 lock scripts are about
	// 20 KB of request (within one write buffer) and hold the server for
	// well under a millisecond, so one batch does not delay the next for
	// long.
	maxBatch = 64
	// noDeadlineWait bounds a batch for calls that have no deadline (lockcore
	// always gives one): go-redis's default ReadTimeout, which bounds such
	// a call on a plain connection. go-redis also bounds every socket read and
	// write by it, so no batch waits longer than this for the server.
	noDeadlineWait = 5 * time.Second
)

// A call's state: queued until a worker takes it to send (sent) or its
// caller gives up first (abandoned). Whichever compare-and-swap wins
// decides whether the script can have run.
const (
	queued int32 = iota
	sent
	abandoned
)

// call is one script waiting for its reply.
type call struct {
	ctx   context.Context
	s     *redis.Script
	keys  []string
	args  []any
	state atomic.Int32

	done chan struct{} // closed when res and err are set
	res  any
	err  error
}

func (c *call) finish(res any, err error) {
	c.res, c.err = res, err
	close(c.done)
}

// pipe is a Node's batcher of lock scripts (see Node.eval).
type pipe struct {
	rdb *redis.Client
	// slots holds a token per round trip in flight, of a call sent by its
	// caller or of a worker's pipeline.
	slots chan struct{}
	// calls are the calls waiting for a worker. Unbuffered: a waiting call
	// is a caller blocked sending, and leaves as soon as its context ends.
	calls chan *call
	// collect is held by the one worker that gathers the next batch, so
	// that the waiting calls go in one pipeline, not one per idle worker.
	collect chan struct{}
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	// evalOnNoScript sends a call that found no script (NOSCRIPT) again
	// with EVAL; off (a protected Node's bound scripts, see bound.go), such
	// a call fails with errUnjudged.
	evalOnNoScript atomic.Bool
}

func newPipe(rdb *redis.Client) *pipe {
	p := &pipe{rdb: rdb, slots: make(chan struct{}, pipeWorkers), calls: make(chan *call),
		collect: make(chan struct{}, 1), stop: make(chan struct{})}
	p.wg.Add(pipeWorkers)
	for range pipeWorkers {
		go p.work()
	}
	return p
}

// close makes the workers stop once their batch in flight is done (closing
// the client ends it at once) and fails every later call with
// redis.ErrClosed. wait waits for the workers to return.
func (p *pipe) close() { p.once.Do(func() { close(p.stop) }) }
func (p *pipe) wait()  { p.wg.Wait() }

// notSent is the error of a call whose context ended before it was sent: its
// script did not run.
func notSent(err error) error {
	return fmt.Errorf("redisnode: not sent, the script did not run: %w", err)
}

// noReply is the error of a call whose context ended while it was in
// flight: its script may have run, as when a reply is lost.
func noReply(err error) error {
	return fmt.Errorf("redisnode: no reply in time, the script may have run: %w", err)
}

// do runs script s with EVALSHA (EVAL on NOSCRIPT) and returns its reply.
// It does not send a call whose context has already ended.
//
// With a slot free, it sends the call itself, with ctx, as before the pipe:
// the call ends by ctx's deadline, which go-redis puts on the socket.
// Otherwise the call waits for the next batch and do returns, as soon as
// ctx ends, ctx's error wrapped by notSent or noReply (so an expired
// deadline matches context.DeadlineExceeded).
func (p *pipe) do(ctx context.Context, s *redis.Script, keys []string, args []any) (any, error) {
	select {
	case <-p.stop:
		return nil, redis.ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, notSent(err)
	}
	select {
	case p.slots <- struct{}{}: // free only when no worker waits for one
		defer func() { <-p.slots }()
		if !p.evalOnNoScript.Load() {
			return s.EvalSha(ctx, p.rdb, keys, args...).Result()
		}
		return s.Run(ctx, p.rdb, keys, args...).Result()
	default:
	}
	c := &call{ctx: ctx, s: s, keys: keys, args: args, done: make(chan struct{})}
	select {
	case p.calls <- c:
	case <-ctx.Done():
		return nil, notSent(ctx.Err())
	case <-p.stop:
		return nil, redis.ErrClosed
	}
	// A worker has the call now and answers it before it returns, within
	// the batch's bounded deadline.
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		select {
		case <-c.done: // answered at the same moment: a real reply is worth more
			return c.res, c.err
		default:
		}
		if c.state.CompareAndSwap(queued, abandoned) {
			return nil, notSent(ctx.Err())
		}
		return nil, noReply(ctx.Err())
	}
}

// work sends batches until the pipe is closed. The worker that holds
// collect blocks for a first call, then for a slot, then takes, without
// waiting, the calls whose callers are blocked sending at that moment, up to
// maxBatch, and lets the next worker collect while it sends them. Calls
// that arrive while every slot is taken thus form one batch, sent as soon
// as a slot frees.
func (p *pipe) work() {
	defer p.wg.Done()
	batch := make([]*call, 0, maxBatch)
	cmds := make([]*redis.Cmd, 0, maxBatch)
	for {
		select {
		case p.collect <- struct{}{}:
		case <-p.stop:
			return
		}
		select {
		case c := <-p.calls:
			batch = append(batch[:0], c)
		case <-p.stop:
			<-p.collect
			return
		}
		p.slots <- struct{}{} // the round trips in flight end by their deadlines, or when the client closes
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-p.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		<-p.collect
		p.exec(batch, cmds)
		<-p.slots
		clear(batch) // let the answered calls and their replies go
		clear(cmds[:cap(cmds)])
	}
}

// exec sends the calls of batch whose contexts have not ended in one
// pipeline of EVALSHAs, then those that found no script (NOSCRIPT: they did
// not run) in one pipeline of EVALs, and answers every call of batch.
//
// The pipelines' deadline is the latest of their calls' deadlines (a call
// without one counts as noDeadlineWait from now), so a call with a later
// deadline is never cut short by one with an earlier; the earlier caller
// stops waiting at its own deadline (see do), as it would for a lost reply.
func (p *pipe) exec(batch []*call, cmds []*redis.Cmd) {
	live, dl := takeLive(batch, time.Now())
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	cmds = p.send(ctx, live, cmds, false)
	again := answerSent(live, cmds)
	if len(again) == 0 {
		return
	}
	if !p.evalOnNoScript.Load() {
		// Bound scripts (bound.go): the process lacks them, and no
		// check judged it; they did not run.
		for _, c := range again {
			c.finish(nil, errUnjudged)
		}
		return
	}
	// The script cache was flushed (or the server restarted): EVAL runs
	// the script and loads it again for the next EVALSHAs.
	cmds = p.send(ctx, again, cmds, true)
	for i, c := range again {
		res, err := cmds[i].Result()
		c.finish(res, timedOut(c.ctx, err))
	}
}

// takeLive marks sent, and returns, the calls of batch whose contexts have
// not ended and whose callers have not abandoned them, with the latest of
// their deadlines (a call without one counts as noDeadlineWait from now);
// it answers the others as not sent. It filters batch in place: live[i] is
// written after batch[i] is read.
func takeLive(batch []*call, now time.Time) (live []*call, dl time.Time) {
	live = batch[:0]
	for _, c := range batch {
		if c.ctx.Err() != nil || !c.state.CompareAndSwap(queued, sent) {
			c.finish(nil, notSent(c.ctx.Err()))
			continue
		}
		d, ok := c.ctx.Deadline()
		if !ok || d.Sub(now) > noDeadlineWait {
			d = now.Add(noDeadlineWait)
		}
		if d.After(dl) {
			dl = d
		}
		live = append(live, c)
	}
	return live, dl
}

// answerSent answers the calls of live from their EVALSHAs' replies cmds,
// and returns, filtered in place, those that found no script (NOSCRIPT:
// they did not run) and whose callers still wait, to be sent again with
// EVAL. A call whose caller has gone is answered as not sent: its script
// did not run, and it stays so.
func answerSent(live []*call, cmds []*redis.Cmd) (again []*call) {
	again = live[:0]
	for i, c := range live {
		err := cmds[i].Err()
		switch {
		case err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT"): // nil first: HasErrorPrefix allocates
			c.finish(cmds[i].Val(), timedOut(c.ctx, err))
		case c.ctx.Err() != nil:
			c.finish(nil, notSent(c.ctx.Err()))
		default:
			again = append(again, c)
		}
	}
	return again
}

// send runs one script call per element of calls in one pipeline (EVAL if
// eval, else EVALSHA) and returns their commands in cmds' storage. go-redis
// does not retry it (MaxRetries is off) and sets every command's error.
func (p *pipe) send(ctx context.Context, calls []*call, cmds []*redis.Cmd, eval bool) []*redis.Cmd {
	pl := p.rdb.Pipeline()
	cmds = cmds[:0]
	for _, c := range calls {
		if eval {
			cmds = append(cmds, c.s.Eval(ctx, pl, c.keys, c.args...))
		} else {
			cmds = append(cmds, c.s.EvalSha(ctx, pl, c.keys, c.args...))
		}
	}
	_, _ = pl.Exec(ctx) // each command carries its own error
	return cmds
}
