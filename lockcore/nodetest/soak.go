package nodetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// SoakFor is how long a soak of lock sets runs: 5 s, or
// LOCKGATE_SET_SOAK (a Go duration, "60s").
func SoakFor(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("LOCKGATE_SET_SOAK")
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("LOCKGATE_SET_SOAK: %v", err)
	}
	return d
}

// The soak's shape: clients taking random sets of 2 to 8 of names.
const (
	soakClients = 16
	soakNames   = 20
)

// SoakSets runs 16 clients that each take random sets of 2 to 8 of 20
// names with acquire, with waits of 1 to 3 s, hold each set a few
// milliseconds and release it, for d. It fails t when a member is granted
// to a set while another set holds it, when a member's token is not above
// its previous holder's, when an answer comes more than 500 ms after its
// wait, or when more than one request in a hundred runs out of its wait.
// With one order no set waits in a cycle, and these waits are far above
// what a set waits for in turn, though a convoy behind sets of 8 can
// (rarely) outlast one: sets taken in the order asked deadlock, and most
// of their waits run out. It logs the sets granted per second.
func SoakSets(t *testing.T, rl *lockcore.Redlock, acquire SetAcquirer, d time.Duration) {
	t.Helper()
	run := lockcore.NewLeaseID()[:8]
	var (
		mu      sync.Mutex
		holder  = map[string]string{} // member → the set lease holding it, as granted
		last    = map[string]int64{}  // member → the last token granted
		granted int
		refused int
		maxLate = -time.Hour // the most an answer came after its wait
		longest time.Duration
	)
	errs := make(chan error, soakClients)
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for c := range soakClients {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			for time.Now().Before(stop) {
				members := rnd.Perm(soakNames)[:2+rnd.IntN(7)]
				req := lockcore.SetAcquireRequest{TTL: 10 * time.Second, Wait: time.Second + time.Duration(rnd.IntN(2000))*time.Millisecond}
				for _, m := range members {
					req.Resources = append(req.Resources, fmt.Sprintf("soak%s-%02d", run, m))
				}
				asked := time.Now()
				set, err := acquire(context.Background(), rl, req)
				took := time.Since(asked)
				mu.Lock()
				maxLate, longest = max(maxLate, took-req.Wait), max(longest, took)
				if err != nil {
					refused++
					mu.Unlock()
					if !errors.Is(err, lockcore.ErrTaken) {
						errs <- fmt.Errorf("client %d: %v", c, err)
						return
					}
					continue
				}
				granted++
				for _, l := range set.Members {
					if holder[l.Resource] != "" {
						mu.Unlock()
						errs <- fmt.Errorf("%s granted to a second set while another held it", l.Resource)
						return
					}
					if l.Token <= last[l.Resource] {
						mu.Unlock()
						errs <- fmt.Errorf("%s granted with token %d, not above the last one %d", l.Resource, l.Token, last[l.Resource])
						return
					}
					holder[l.Resource], last[l.Resource] = set.ID, l.Token
				}
				mu.Unlock()
				time.Sleep(time.Duration(rnd.IntN(3)) * time.Millisecond)
				mu.Lock()
				for _, l := range set.Members {
					delete(holder, l.Resource)
				}
				mu.Unlock()
				if err := rl.ReleaseSet(context.Background(), lockcore.SetReleaseRequest{Resources: req.Resources, LeaseID: set.ID}); err != nil {
					errs <- fmt.Errorf("client %d: ReleaseSet: %v", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	took := time.Since(start)
	t.Logf("%d clients, sets of 2-8 of %d names: %d sets granted, %d waits ran out in %v: %.0f sets/s; the longest request took %v",
		soakClients, soakNames, granted, refused, took.Round(time.Millisecond), float64(granted)/took.Seconds(), longest.Round(time.Millisecond))
	if granted == 0 || refused > (granted+refused)/100 {
		t.Errorf("%d sets granted, %d waits ran out", granted, refused)
	}
	if maxLate > 500*time.Millisecond {
		t.Errorf("an answer came %v after its wait", maxLate)
	}
}
