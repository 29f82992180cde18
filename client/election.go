package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/api"
)

// Leader election is a lock: campaigning is acquiring it with a wait (the
// term is the fencing token, which grows with every new leader), observing
// is watching it (a long poll on GET /locks/{election}), resigning is
// releasing it. docs/watch.md has the recipe with curl alone.

// Leader is who holds an election's lock.
type Leader struct {
	// Term is the leader's fencing token: every new leader's is higher.
	// 0 when nobody leads.
	Term  int64
	Owner string
	// Expires is when the leader's lock runs out unless it renews it.
	Expires time.Time
}

// DefaultPoll is how long one long poll of Watch and Observe waits when
// the caller gives no wait: below the gateway's default write timeout and
// most proxies' idle timeouts.
const DefaultPoll = 55 * time.Second

// Watch answers a long poll of resource: the holder as soon as its token
// differs from after (0: free), or when wait ends (0: DefaultPoll), the
// holder then. A free lock is a Leader with Term 0, not an error.
//
// Errors: *ProblemError (ErrNoQuorum, ErrBadRequest, ErrUnauthorized,
// ErrForbidden; a 429 when the replica has its maximum of watchers),
// *TLSError,
// *NoAnswerError, or the context's error.
func (c *Client) Watch(ctx context.Context, resource string, after int64, wait time.Duration) (Leader, error) {
	if wait <= 0 {
		wait = DefaultPoll
	}
	u := *c.base
	u.Path, u.RawPath = c.base.Path+"/locks/"+resource, c.base.EscapedPath()+"/locks/"+url.PathEscape(resource)
	u.RawQuery = url.Values{"after": {strconv.FormatInt(after, 10)}, "wait_ms": {strconv.FormatInt(wait.Milliseconds(), 10)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Leader{}, fmt.Errorf("lockgate: watch: %w", err)
	}
	req.Header.Set("Accept", api.MediaJSON+", "+api.MediaProblem)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	injectTrace(ctx, req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return Leader{}, c.noAnswer(ctx, "watch", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Leader{}, c.noAnswer(ctx, "watch", err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		var info api.LockInfo
		if err := json.Unmarshal(raw, &info); err != nil || info.FencingToken <= 0 {
			return Leader{}, fmt.Errorf("lockgate: watch: bad answer: %s", raw)
		}
		return Leader{Term: info.FencingToken, Owner: info.Owner, Expires: info.ExpiresAt}, nil
	case resp.StatusCode == http.StatusNotFound:
		pe := problemOf(resp, raw)
		if errors.Is(pe, ErrNotHeld) {
			return Leader{}, nil
		}
		return Leader{}, pe
	default:
		return Leader{}, problemOf(resp, raw)
	}
}

// noAnswer is the error of a request that got no (whole) answer.
func (c *Client) noAnswer(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return errors.Join(fmt.Errorf("lockgate: %s: %w", op, ctx.Err()), ctx.Err())
	}
	if te := tlsFailure(op, err); te != nil {
		return te
	}
	return &NoAnswerError{Op: op, Err: err}
}

// Observe follows election's leader until ctx ends: the channel gets the
// leader as it is when Observe starts (Term 0 if none), then every change
// this client sees, each term once and in increasing order (a Leader with
// Term 0 between two terms when the election was seen without a leader).
// Transient failures are retried with back-off; other errors (a bad name,
// 401, 403) end the observation: the channel is closed, and so it is when
// ctx ends. A term that came and went between two answers is not seen.
func (c *Client) Observe(ctx context.Context, election string) <-chan Leader {
	ch := make(chan Leader, 1)
	o := &observation{c: c, election: election, first: true, backoff: minBackoff}
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			l, ok := o.next(ctx)
			if !ok {
				return
			}
			select {
			case ch <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// observation is Observe's state: the last leader sent.
type observation struct {
	c        *Client
	election string
	last     Leader
	first    bool
	backoff  time.Duration
}

// next returns the next leader to send; false when the observation ends.
func (o *observation) next(ctx context.Context) (Leader, bool) {
	for {
		var l Leader
		var err error
		if o.first {
			l, err = o.c.first(ctx, o.election)
		} else {
			l, err = o.c.Watch(ctx, o.election, o.last.Term, 0)
		}
		if err != nil {
			if !retryWatch(err) || !sleep(ctx, jitter(o.backoff)) {
				return Leader{}, false
			}
			o.backoff = min(o.backoff*2, 5*time.Second)
			continue
		}
		o.backoff = minBackoff
		if newer(o.last, l, o.first) {
			o.last, o.first = l, false
			return l, true
		}
		// An answer from a replica that saw less (a stale term comes back
		// at once): do not ask it in a tight loop.
		if !sleep(ctx, jitter(minBackoff)) {
			return Leader{}, false
		}
	}
}

// retryWatch reports whether a watch that failed with err is worth asking
// again: a transient failure, or a replica at its maximum of watchers.
func retryWatch(err error) bool {
	var pe *ProblemError
	return Transient(err) || errors.As(err, &pe) && pe.Status == http.StatusTooManyRequests
}

// first reads the leader at once (a poll that answers whatever the state).
func (c *Client) first(ctx context.Context, election string) (Leader, error) {
	info, err := c.Get(ctx, election)
	if errors.Is(err, ErrNotHeld) {
		return Leader{}, nil
	}
	if err != nil {
		return Leader{}, err
	}
	return Leader{Term: info.FencingToken, Owner: info.Owner, Expires: info.ExpiresAt}, nil
}

// newer reports whether l is news after last: the first answer, a higher
// term, or no leader after one.
func newer(last, l Leader, first bool) bool {
	switch {
	case first:
		return true
	case l.Term == 0:
		return last.Term != 0
	default:
		return l.Term > last.Term
	}
}

// Campaign waits until this client leads election and returns its lock:
// the term is Lock.FencingToken, the watchdog keeps the leadership, Done
// closes when it can no longer be counted on (then campaign again), and
// Lock.Release resigns. o.Wait is how long each acquisition waits before
// it is asked again (default 30s, within the gateway's -max-wait); the
// campaign itself goes on until ctx ends. Transient failures are retried
// with back-off.
//
// Errors: as Lock's that are neither ErrTaken nor transient, or the
// context's error.
func (c *Client) Campaign(ctx context.Context, election string, o *LockOptions) (*Lock, error) {
	opt := o.withDefaults()
	if opt.Wait <= 0 {
		opt.Wait = 30 * time.Second
	}
	backoff := minBackoff
	for {
		l, err := c.Lock(ctx, election, &opt)
		switch {
		case err == nil:
			return l, nil
		case ctx.Err() != nil:
			return nil, errors.Join(err, ctx.Err())
		case errors.Is(err, ErrTaken):
			backoff = minBackoff // the wait ran out: wait again
		case Transient(err):
			if !sleep(ctx, jitter(backoff)) {
				return nil, errors.Join(err, ctx.Err())
			}
			backoff = min(backoff*2, 5*time.Second)
		default:
			return nil, err
		}
	}
}
