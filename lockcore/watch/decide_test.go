package watch

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Unix(1000, 0)
	later, earlier := now.Add(time.Second), now.Add(-time.Millisecond)
	held := func(tok int64, exp time.Time) state {
		return state{known: true, held: true, token: tok, owner: "o", expires: exp}
	}
	free := func(floor int64) state { return state{known: true, token: floor} }
	readHeld := func(tok int64) observation { return observation{held: true, token: tok, owner: "p", expires: later} }
	kinds := func(evs []Event) (out []string) {
		for _, e := range evs {
			out = append(out, string(e.Kind)+":"+strconv.FormatInt(e.Token, 10))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		st   state
		ob   observation
		want []string
	}{
		{"the first read only sets the state", state{}, readHeld(5), nil},
		{"an extension is no event", held(5, later), readHeld(5), nil},
		{"a new holder ends the old one first", held(5, later), readHeld(7), []string{"released:5", "acquired:7"}},
		{"a new holder after the TTL ran out follows an expiry", held(5, earlier), readHeld(7), []string{"expired:5", "acquired:7"}},
		{"a lock gone before its TTL was released", held(5, later), observation{}, []string{"released:5"}},
		{"a lock gone after its TTL expired", held(5, earlier), observation{}, []string{"expired:5"}},
		{"an announced release is a release even late", held(5, earlier), observation{released: true}, []string{"released:5"}},
		{"a force release here is named so", held(5, later), observation{forced: true, released: true}, []string{"force-released:5"}},
		{"a free lock taken", free(5), readHeld(6), []string{"acquired:6"}},
		{"a free lock read free", free(5), observation{}, nil},
		{"a stale holder after a release is not believed", free(5), readHeld(5), nil},
		{"a lower token is not believed", held(7, later), readHeld(6), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, next := decide(tc.st, tc.ob, now)
			if got := kinds(evs); !slices.Equal(got, tc.want) {
				t.Errorf("events %v, want %v", got, tc.want)
			}
			if !next.known {
				t.Error("the state is not known after a read")
			}
			if next.token < tc.st.token {
				t.Errorf("the token floor went from %d to %d", tc.st.token, next.token)
			}
		})
	}
}

func TestNextRead(t *testing.T) {
	now := time.Unix(1000, 0)
	free := state{known: true}
	soon := state{known: true, held: true, expires: now.Add(100 * time.Millisecond)}
	far := state{known: true, held: true, expires: now.Add(time.Hour)}
	past := state{known: true, held: true, expires: now.Add(-time.Hour)}
	for _, tc := range []struct {
		name  string
		st    state
		poll  time.Duration
		want  time.Duration
		timed bool
	}{
		{"polling: a free lock waits for the poll", free, time.Second, time.Second, true},
		{"polling: a held lock is read when its TTL runs out", soon, time.Second, 100*time.Millisecond + expirySlack, true},
		{"polling: a held lock far from expiry waits for the poll", far, time.Second, time.Second, true},
		{"polling: a lock past its TTL is read again, not at once", past, time.Second, minGap, true},
		{"announced: a free lock is read only when woken", free, 0, 0, false},
		{"announced: a held lock is read when its TTL runs out", soon, 0, 100*time.Millisecond + expirySlack, true},
		{"announced: a held lock far from expiry waits for its TTL", far, 0, time.Hour + expirySlack, true},
		{"announced: a lock past its TTL is read again, not at once", past, 0, minGap, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, timed := nextRead(tc.st, now, tc.poll)
			if got != tc.want || timed != tc.timed {
				t.Errorf("nextRead = %v, %v; want %v, %v", got, timed, tc.want, tc.timed)
			}
		})
	}
}
