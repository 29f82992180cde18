package redisnode

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lockcore"
)

// judge, rule by rule: each row is one record a node may hold when the
// process "p1" answers with replication id "r1", and the health every
// gateway must read from it.
func TestJudge(t *testing.T) {
	const id, proc = "p1", "p1|r1"
	// served is a node recovered for p1 with r1, in service.
	served := checkReply{init: true, rid: id, rrepl: proc, format: dataFormat, qsince: -1, boot: -1, now: 5000, epoch: "e"}
	with := func(f func(*checkReply)) checkReply { v := served; f(&v); return v }
	cases := []struct {
		name   string
		v      checkReply
		want   lockcore.NodeHealth
		reason string // a word of Reason when Lost
	}{
		{"in service for this process", served,
			lockcore.NodeHealth{Initialized: true, Epoch: "e"}, ""},
		{"new node, not marked",
			with(func(v *checkReply) { v.init, v.rid = false, "" }),
			lockcore.NodeHealth{Epoch: "e"}, ""},
		{"marked for this process",
			with(func(v *checkReply) { v.init, v.boot, v.brid = false, 2000, id }),
			lockcore.NodeHealth{Epoch: "e", Initializing: true, InitializingFor: 3 * time.Second}, ""},
		{"marked for another process",
			with(func(v *checkReply) { v.init, v.boot, v.brid = false, 2000, "p0" }),
			lockcore.NodeHealth{Epoch: "e", Lost: true}, "marked for initialization"},
		{"quarantined, every slot marked",
			with(func(v *checkReply) { v.qsince, v.qrid, v.qdone = 1000, id, true }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Quarantined: true, QuarantinedFor: 4 * time.Second}, ""},
		{"quarantine under way",
			with(func(v *checkReply) { v.qsince, v.qrid = 1000, id }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Quarantined: true, QuarantinedFor: 4 * time.Second, Lost: true}, "not every slot"},
		{"quarantined copy on another process",
			with(func(v *checkReply) { v.qsince, v.qrid, v.qdone = 1000, "p0", true }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Lost: true}, "quarantined copy"},
		{"no recovery record",
			with(func(v *checkReply) { v.rid = "" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Lost: true}, "no recovery record"},
		{"recovered for another process",
			with(func(v *checkReply) { v.rid = "p0" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Lost: true}, "last recovered"},
		{"recovered for this process with another replication history (a failback)",
			with(func(v *checkReply) { v.rrepl = "p1|r0" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Lost: true}, "failback"},
		{"no replication history (a gateway before rrepl recovered it)",
			with(func(v *checkReply) { v.rrepl = "" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e"}, ""},
		{"the replication history of an earlier process (left by such a gateway)",
			with(func(v *checkReply) { v.rrepl = "p0|r0" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e"}, ""},
		{"quarantined for this process, whatever its replication history",
			with(func(v *checkReply) { v.qsince, v.qrid, v.qdone, v.rid, v.rrepl = 1000, id, true, "", "" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Quarantined: true, QuarantinedFor: 4 * time.Second}, ""},
		{"quarantined for this process by a gateway before rrepl (another history kept)",
			with(func(v *checkReply) { v.qsince, v.qrid, v.qdone, v.rid, v.rrepl = 1000, id, true, "", "p1|r0" }),
			lockcore.NodeHealth{Initialized: true, Epoch: "e", Quarantined: true, QuarantinedFor: 4 * time.Second}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := judge(c.v, id, proc)
			reason := got.Reason
			got.Reason = ""
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("judge = %+v, want %+v", got, c.want)
			}
			if c.want.Lost != (reason != "") || !strings.Contains(reason, c.reason) {
				t.Fatalf("Reason %q, want one containing %q (only when lost)", reason, c.reason)
			}
		})
	}
}

// isFailback and sameProcesses, rule by rule: a record's replication
// history against the one found. A process found with no replication id
// ("p1|": not promoted since it made or freed its backlog) is no
// failback, whatever the record names; one promoted since is.
func TestIsFailbackAndSameProcesses(t *testing.T) {
	cases := []struct {
		name      string
		rec, proc string
		failback  bool
	}{
		{"the same history", "p1|r1", "p1|r1", false},
		{"promoted since (a failback)", "p1|r1", "p1|r2", true},
		{"promoted since a record with no replication id", "p1|", "p1|r2", true},
		{"its backlog made or freed since a promotion", "p1|r1", "p1|", false},
		{"no promotion ever", "p1|", "p1|", false},
		{"the record of another process (an earlier gateway's)", "p0|r0", "p1|r2", false},
		{"no record", "", "p1|r2", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := isFailback(c.rec, "p1", c.proc); got != c.failback {
				t.Fatalf("isFailback(%q, p1, %q) = %v, want %v", c.rec, c.proc, got, c.failback)
			}
			// The same rule for one primary of a Cluster node, among
			// others unchanged; another process is never the same.
			rec, cur := c.rec+",p2|r9", c.proc+",p2|r9"
			want := !c.failback && strings.HasPrefix(c.rec, "p1|")
			if got := sameProcesses(rec, cur); got != want {
				t.Fatalf("sameProcesses(%q, %q) = %v, want %v", rec, cur, got, want)
			}
		})
	}
	for _, c := range []struct{ rec, cur string }{
		{"p1|r1", "p1|r1,p2|r9"},       // a shard added
		{"p1|r1,p2|r9", "p1|r1"},       // a shard gone
		{"p1|r1,p2|r9", "p1|r1,p3|r9"}, // a shard's new process
		{"p1|r1,p2|r9", "p1|,p3|"},     // the same, with no replication id
	} {
		if sameProcesses(c.rec, c.cur) {
			t.Fatalf("sameProcesses(%q, %q) = true, want false", c.rec, c.cur)
		}
	}
}

func TestSettingsRefusal(t *testing.T) {
	cases := []struct {
		set    nodeSettings
		format int64
		want   string // a word of the refusal, "" for none
		evicts bool
	}{
		{nodeSettings{"noeviction", "no", "0", false}, dataFormat, "", false},
		{nodeSettings{"noeviction", "", "", false}, dataFormat, "", false}, // CONFIG not allowed: not verified
		{nodeSettings{"noeviction", "no", "0", false}, dataFormat - 1, "", false},
		{nodeSettings{"noeviction", "yes", "0", false}, dataFormat, "DEBUG RELOAD", false},
		{nodeSettings{"noeviction", "local", "0", false}, dataFormat, "DEBUG RELOAD", false},
		{nodeSettings{"noeviction", "no", "3600", false}, dataFormat, "repl-backlog-ttl 3600", false},
		{nodeSettings{"noeviction", "no", "0", false}, dataFormat + 1, "data format", false},
		{nodeSettings{"allkeys-lru", "yes", "3600", false}, dataFormat, "evicts keys", true},
		{nodeSettings{"", "no", "0", false}, dataFormat + 1, "evicts keys", true}, // no policy read: assume the worst
	}
	for _, c := range cases {
		got, evicts := settingsRefusal(c.set, c.format)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) || evicts != c.evicts {
			t.Errorf("settingsRefusal(%+v, %d) = %q, %v; want %q, %v", c.set, c.format, got, evicts, c.want, c.evicts)
		}
	}
}

func TestIsFormat1(t *testing.T) {
	old := checkReply{init: true, qsince: -1}
	cases := []struct {
		name string
		v    checkReply
		want bool
	}{
		{"an earlier lockgate's node in service", old, true},
		{"not initialized", checkReply{qsince: -1}, false},
		{"recovered", checkReply{init: true, qsince: -1, rid: "p"}, false},
		{"this format", checkReply{init: true, qsince: -1, format: dataFormat}, false},
		{"quarantined", checkReply{init: true, qsince: 0}, false},
	}
	for _, c := range cases {
		if got := isFormat1(c.v); got != c.want {
			t.Errorf("%s: isFormat1 = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestLegacySlot(t *testing.T) {
	for _, r := range []string{"a", "orders:42", "{x}y", ""} {
		if got, want := legacySlot("lockgate:{"+r+"}:fence"), lockcore.FenceSlot(r); got != want {
			t.Errorf("legacySlot of %q = %d, want %d", r, got, want)
		}
	}
}
