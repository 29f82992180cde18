package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/gatewaytest"
	"github.com/lockgate/lockgate/internal/redistest"
	"github.com/lockgate/lockgate/internal/testlog"
)

// observer records the terms one client.Observe saw.
type observer struct {
	mu      sync.Mutex
	terms   []int64  // every Leader received, 0 for none
	leaders []string // the same, as term/owner, for a failure's message
}

func (o *observer) seen() []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.terms)
}

func (o *observer) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.leaders, " ")
}

func observeElection(t *testing.T, ctx context.Context, base, election string) *observer {
	t.Helper()
	c, err := client.New(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{}
	go func() {
		for l := range c.Observe(ctx, election) {
			o.mu.Lock()
			o.terms = append(o.terms, l.Term)
			o.leaders = append(o.leaders, fmt.Sprintf("%d/%s", l.Term, l.Owner))
			o.mu.Unlock()
		}
	}()
	return o
}

// campaigner is one `lockgate run` that campaigns with --wait and, while it
// leads, runs a command that writes its term (LOCKGATE_FENCING_TOKEN) to a
// file and sleeps.
type campaigner struct {
	cmd  *exec.Cmd
	file string
	done chan struct{}
	log  testlog.Buffer // run's stderr, shown when the test fails
}

func campaign(t *testing.T, lockgate, gateway, election, owner, dir string, ttl time.Duration) *campaigner {
	t.Helper()
	c := &campaigner{file: filepath.Join(dir, owner), done: make(chan struct{})}
	c.cmd = exec.Command(lockgate, "run", "--gateway", gateway, "--lock", election, "--ttl", ttl.String(),
		"--wait", "2m", "--owner", owner, "--",
		"sh", "-c", `echo "$LOCKGATE_FENCING_TOKEN" >>"$0"; exec sleep 600`, c.file)
	c.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	c.cmd.Stderr = &c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill() // its command hears of it (parent-death signal)
		<-c.done
		if t.Failed() {
			t.Logf("lockgate run --owner %s: %s", owner, c.log.String())
		}
	})
	return c
}

// terms returns the terms this campaigner's command was started with.
func (c *campaigner) terms(t *testing.T) []int64 {
	t.Helper()
	b, err := os.ReadFile(c.file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q is not a term", c.file, f)
		}
		out = append(out, n)
	}
	return out
}

// eventually waits until cond holds, failing t after a long bound (a hang,
// not a timing goal).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60s", what)
		}
	}
}

// TestElectionSurvivesKilledLeaders runs three campaigners (lockgate run
// --wait, on two gateway replicas over three redis-servers) and two
// observers (client.Observe, one per replica). The leader is SIGKILLed,
// its lease left to expire, twice: each time exactly one other campaigner
// takes over, terms strictly increase, and each observer sees every term
// once, in order.
func TestElectionSurvivesKilledLeaders(t *testing.T) {
	lockgate := binary(t, "lockgate")
	var urls []string
	for _, n := range redistest.StartN(t, 3, nil) {
		urls = append(urls, n.URL())
	}
	gws := []*gatewaytest.Process{start(t, lockgate, "-redis", strings.Join(urls, ",")), start(t, lockgate, "-redis", strings.Join(urls, ","))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const election, ttl = "election", 2 * time.Second
	observers := []*observer{observeElection(t, ctx, gws[0].URL, election), observeElection(t, ctx, gws[1].URL, election)}
	eventually(t, "the observers' first answer", func() bool {
		return len(observers[0].seen()) > 0 && len(observers[1].seen()) > 0
	})

	dir := t.TempDir()
	var cs []*campaigner
	for i := range 3 {
		cs = append(cs, campaign(t, lockgate, gws[i%2].URL, election, fmt.Sprintf("c%d", i), dir, ttl))
	}
	leaders := func() (who []int) {
		for i, c := range cs {
			if len(c.terms(t)) > 0 {
				who = append(who, i)
			}
		}
		return who
	}
	var terms []int64
	alive := map[int]bool{0: true, 1: true, 2: true}
	for round := range 3 {
		eventually(t, fmt.Sprintf("leader %d", round+1), func() bool { return len(leaders()) == round+1 })
		// Exactly one new leader: one more campaigner has a term, and
		// each has at most one.
		var leader int
		for _, i := range leaders() {
			got := cs[i].terms(t)
			if len(got) != 1 {
				t.Fatalf("campaigner %d led %d times: %v", i, len(got), got)
			}
			if alive[i] {
				leader = i
			}
		}
		term := cs[leader].terms(t)[0]
		if len(terms) > 0 && term <= terms[len(terms)-1] {
			t.Fatalf("term %d after %v: not increasing", term, terms)
		}
		terms = append(terms, term)
		for _, o := range observers {
			eventually(t, fmt.Sprintf("term %d observed", term), func() bool { return slices.Contains(o.seen(), term) })
		}
		if round == 2 {
			break
		}
		killed := time.Now()
		if err := cs[leader].cmd.Process.Kill(); err != nil { // SIGKILL: its lease is left to expire
			t.Fatal(err)
		}
		<-cs[leader].done
		alive[leader] = false
		eventually(t, "a new leader", func() bool { return len(leaders()) == round+2 })
		t.Logf("round %d: new leader %v after the kill (TTL %v)", round+1, time.Since(killed), ttl)
	}
	for i, o := range observers {
		var got []int64
		for _, term := range o.seen() {
			if term != 0 {
				got = append(got, term)
			}
		}
		if !slices.Equal(got, terms) {
			t.Errorf("observer %d saw terms %v (term/owner: %v), want each of %v once, in order", i, got, o, terms)
		}
	}
}
