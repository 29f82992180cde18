package watch

import "time"

// state is what a tracker last knew of its resource.
type state struct {
	// known is false until the first successful read.
	known bool
	held  bool
	// token is the holder's fencing token while held; once free, the last
	// token seen, below which no later read is believed (tokens only grow).
	token   int64
	owner   string
	ttl     time.Duration
	expires time.Time // when the holder's lock ends unless extended, as read
}

// observation is one read of the resource and what happened since the
// previous one.
type observation struct {
	held    bool
	token   int64
	owner   string
	ttl     time.Duration
	expires time.Time
	// released: a node announced a release since the previous read.
	released bool
	// forced: this replica force-released the resource since the
	// previous read.
	forced bool
}

// decide returns the events that lead from st to what ob read at now, and
// the new state. It is the watch's only rule:
//
//	before        read               events
//	unknown       anything           none (the state is only a snapshot)
//	held T        held T             none (an extension: expiry updated)
//	held T        held U > T         end of T, acquired U
//	held T        free               end of T
//	free (≥ F)    held U > F         acquired U
//	any           held U ≤ floor     none (a stale read; tokens only grow)
//	free          free               none
//
// The end of T is force-released when this replica broke the lock since
// the last read, released when a node announced a release, expired when
// the lock's TTL as last read has run out, released otherwise (a release
// whose announcement is still on its way, or a force release elsewhere).
func decide(st state, ob observation, now time.Time) ([]Event, state) {
	next := state{known: true, held: ob.held, token: ob.token, owner: ob.owner, ttl: ob.ttl, expires: ob.expires}
	if !ob.held {
		next.token = st.token // the floor stays
	}
	if !st.known {
		return nil, next
	}
	if stale(st, ob) {
		return nil, st // never go back
	}
	var evs []Event
	if st.held && (!ob.held || ob.token != st.token) {
		evs = append(evs, Event{Kind: endKind(st, ob, now), Token: st.token, Owner: st.owner})
	}
	if ob.held && (!st.held || ob.token != st.token) {
		evs = append(evs, Event{Kind: Acquired, Held: true, Token: ob.token, Owner: ob.owner, TTL: ob.ttl, Expires: ob.expires})
	}
	return evs, next
}

// stale reports whether ob read a holder older than what st knows.
func stale(st state, ob observation) bool {
	return ob.held && (ob.token < st.token || ob.token == st.token && !st.held)
}

// endKind says how the lock held as st ended.
func endKind(st state, ob observation, now time.Time) Kind {
	switch {
	case ob.forced:
		return ForceReleased
	case ob.released:
		return Released
	case !now.Before(st.expires):
		return Expired
	default:
		return Released
	}
}

// nextRead returns when a tracker in st reads again without being woken,
// and false when it need not until woken: just after the holder's TTL as
// read runs out (an expiry is never announced), and after poll if that
// comes first, never sooner than minGap from now. poll 0 means the nodes
// announce every acquisition and release (the tracker is subscribed to
// both), so only the TTL is waited for.
func nextRead(st state, now time.Time, poll time.Duration) (time.Duration, bool) {
	var d time.Duration
	switch {
	case st.held && poll > 0:
		d = min(poll, st.expires.Sub(now)+expirySlack)
	case st.held:
		d = st.expires.Sub(now) + expirySlack
	case poll > 0:
		d = poll
	default:
		return 0, false
	}
	return max(d, minGap), true
}

const (
	// expirySlack is read after the TTL's end: the nodes expire the lock
	// on their own clocks, a little after the gateway's estimate.
	expirySlack = 5 * time.Millisecond
	// minGap bounds how often a tracker reads a lock that should have
	// expired but still shows held.
	minGap = 5 * time.Millisecond
)
