package nodetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/lockgate/lockgate/lockcore"
)

// RunRejoin checks what a lockcore.Rejoiner keeps for a restart of a
// majority (rule 8 of lockcore's doc): Witness raises the node's ServedAt
// and Witnessed and never lowers them, and acts only on a node in service;
// a restart keeps the record and the node Durable, and so does the
// quarantine begun for it, under which Lent reads its locks and counters
// bound to the quarantine's epoch; any other quarantine ends Durable, and
// a Repair draws a new ID.
//
// newNode must return a Rejoiner on a store that acknowledges no write
// before it is on disk (a Redis node on appendfsync always), and restart
// must restart it keeping everything it acknowledged (a new server
// process that loads the node's data). Nodes newNode returns are put in
// service first, as in Run.
func RunRejoin(t *testing.T, newNode func(t *testing.T) lockcore.Node, restart func(t *testing.T, n lockcore.Node)) {
	s := rejoinSuite{newNode: inService(newNode), restart: restart}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a node in service records what a gateway saw, and only raises it", s.witnessRaises},
		{"a restart keeps the record, and its quarantine lends the data under its epoch", s.restartLends},
		{"a quarantine of the same process ends Durable", s.quarantineEndsDurable},
		{"a repair draws a new ID and judges durability anew", s.repairDrawsAnID},
	} {
		t.Run(c.name, c.run)
	}
}

type rejoinSuite struct {
	newNode func(t *testing.T) lockcore.Node
	restart func(t *testing.T, n lockcore.Node)
}

func rejoiner(t *testing.T, n lockcore.Node) lockcore.Rejoiner {
	t.Helper()
	r, ok := n.(lockcore.Rejoiner)
	if !ok {
		t.Fatalf("%T is no lockcore.Rejoiner", n)
	}
	return r
}

func witness(t *testing.T, n lockcore.Node, seen map[string]int64) {
	t.Helper()
	if err := rejoiner(t, n).Witness(context.Background(), seen); err != nil {
		t.Fatalf("Witness: %v", err)
	}
}

func (s rejoinSuite) witnessRaises(t *testing.T) {
	n := s.newNode(t)
	witness(t, n, map[string]int64{"x": 5})
	h := mustCheck(t, n)
	if h.ID == "" || h.ServedAt <= 0 || !h.Durable || h.Witnessed["x"] != 5 {
		t.Fatalf("after Witness: %+v; want an ID, ServedAt > 0, Durable, Witnessed x = 5", h)
	}
	witness(t, n, map[string]int64{"x": 3, "y": 7})
	h2 := mustCheck(t, n)
	if h2.ID != h.ID || h2.ServedAt <= h.ServedAt || h2.Witnessed["x"] != 5 || h2.Witnessed["y"] != 7 {
		t.Fatalf("after a second Witness: %+v (before %+v); want the same ID, a larger ServedAt, x kept at 5, y = 7", h2, h)
	}
}

func (s rejoinSuite) restartLends(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	lease := lockcore.NewLeaseID()
	tok := mustGrant(t, n, lockcore.NodeAcquire{Resource: "rejoin-held", Lease: lease, TTL: ttl}).Token
	witness(t, n, nil)
	before := mustCheck(t, n)
	s.restart(t, n)
	after := mustCheck(t, n)
	if !after.Lost || after.ID != before.ID || after.ServedAt != before.ServedAt || !after.Durable {
		t.Fatalf("after a restart: %+v (before %+v); want Lost, the same ID and ServedAt, Durable", after, before)
	}
	witness(t, n, map[string]int64{"x": 1})
	if h := mustCheck(t, n); h.ServedAt != before.ServedAt || h.Witnessed["x"] != 0 {
		t.Fatalf("Witness of a restarted node changed it: %+v", h)
	}
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	// Again, as a gateway that found the node lost before the first
	// quarantine began: still Durable (it served nothing since).
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	q := mustCheck(t, n)
	if !q.Quarantined || q.Lost || !q.Durable || q.ID != before.ID {
		t.Fatalf("quarantined twice for the restart: %+v; want quarantined, Durable, the same ID", q)
	}
	lent := rejoiner(t, n).Lent(q.Epoch)
	counters, err := lent.Counters(ctx)
	if err != nil || len(counters) != lockcore.FenceSlots || counters[lockcore.FenceSlot("rejoin-held")] < tok {
		t.Fatalf("lent counters: %d values, %v; want %d with slot of rejoin-held ≥ %d", len(counters), err, lockcore.FenceSlots, tok)
	}
	var names []string
	cursor := ""
	for {
		page, next, err := lent.ScanLocks(ctx, "rejoin-", cursor, 100)
		if err != nil {
			t.Fatalf("lent ScanLocks: %v", err)
		}
		names = append(names, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if !slices.Contains(names, "rejoin-held") {
		t.Fatalf("lent ScanLocks: %v; want rejoin-held", names)
	}
	locks, err := lent.InspectLocks(ctx, []string{"rejoin-held"})
	if err != nil || len(locks) != 1 || !locks[0].Found || locks[0].Lease != lease || locks[0].Token != tok {
		t.Fatalf("lent InspectLocks: %+v, %v; want held by the lease with token %d", locks, err, tok)
	}
	stale := rejoiner(t, n).Lent("another-epoch")
	if _, err := stale.Counters(ctx); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Fatalf("counters lent under another epoch: %v; want ErrNodeChanged", err)
	}
	if _, _, err := stale.ScanLocks(ctx, "", "", 10); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Fatalf("locks lent under another epoch: %v; want ErrNodeChanged", err)
	}
	s.restart(t, n) // the quarantine's process is gone
	if _, err := lent.Counters(ctx); !errors.Is(err, lockcore.ErrNodeChanged) {
		t.Fatalf("counters lent after another restart: %v; want ErrNodeChanged", err)
	}
}

func (s rejoinSuite) quarantineEndsDurable(t *testing.T) {
	n := s.newNode(t)
	witness(t, n, nil)
	if h := mustCheck(t, n); !h.Durable {
		t.Fatalf("after Witness: %+v; want Durable", h)
	}
	if err := n.Quarantine(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := mustCheck(t, n); !h.Quarantined || h.Durable {
		t.Fatalf("quarantined without a restart: %+v; want quarantined, not Durable", h)
	}
}

func (s rejoinSuite) repairDrawsAnID(t *testing.T) {
	ctx := context.Background()
	n := s.newNode(t)
	witness(t, n, nil)
	before := mustCheck(t, n)
	if err := n.Quarantine(ctx); err != nil {
		t.Fatal(err)
	}
	if err := RepairNow(ctx, n, make([]int64, lockcore.FenceSlots)); err != nil {
		t.Fatal(err)
	}
	h := mustCheck(t, n)
	if h.ID == "" || h.ID == before.ID || h.Durable {
		t.Fatalf("after a repair: %+v (before %+v); want a new ID, not Durable until a Witness", h, before)
	}
	witness(t, n, nil)
	if h := mustCheck(t, n); !h.Durable || h.ServedAt <= before.ServedAt {
		t.Fatalf("Witness after the repair: %+v; want Durable, ServedAt above %d", h, before.ServedAt)
	}
}
