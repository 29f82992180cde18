package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockgate/lockgate/chaos/model"
)

// LockOps returns the history's lock operations (acquire, extend, release,
// force release) for model.Mutex. A release that failed is stepped as
// Maybe: its holder stopped acting as one when it sent it, and a 503 may
// follow the deletion of the lease's copies on some nodes; so is a force
// release answered 503 (rule M6). An acquire whose answer was lost before
// it named a minted lease gets a lease of its own, never seen again.
func LockOps(events []Event) []model.Op {
	var out []model.Op
	for i, e := range events {
		k, ok := map[Op]model.Kind{OpAcquire: model.Acquire, OpExtend: model.Extend, OpRelease: model.Release,
			OpForceRelease: model.ForceRelease}[e.Op]
		if !ok {
			continue
		}
		o := opOf(e, k)
		if o.Lease == "" && k != model.ForceRelease {
			o.Lease = fmt.Sprintf("unnamed-%d", i)
		}
		if k == model.Release && o.Outcome == model.Fail || k == model.ForceRelease && e.Status == 503 {
			o.Outcome = model.Maybe
		}
		out = append(out, o)
	}
	return out
}

// PermitOps returns the history's permit operations for model.Semaphore,
// keyed by semaphore; a failed release is stepped as Maybe, as in
// LockOps. An acquire that was not answered names no permit (-1).
func PermitOps(events []Event) []model.Op {
	var out []model.Op
	for _, e := range events {
		k, ok := map[Op]model.Kind{OpPermitAcquire: model.Acquire, OpPermitExtend: model.Extend,
			OpPermitRelease: model.Release}[e.Op]
		if !ok {
			continue
		}
		o := opOf(e, k)
		o.Permit = e.Permit
		o.Detail += fmt.Sprintf(", permit %d of %d", e.Permit, e.Permits)
		if k == model.Acquire && e.Outcome != Ok {
			o.Permit = -1
		}
		if k == model.Release && o.Outcome == model.Fail {
			o.Outcome = model.Maybe
		}
		out = append(out, o)
	}
	return out
}

// StoreOps returns the history's writes to the fenced register for
// model.Store: Ok admitted, Fail (Stale) refused for a lower token. A
// write that failed without being judged (the run's end cancelled it) was
// never made and is left out.
func StoreOps(events []Event) []model.Op {
	var out []model.Op
	for _, e := range events {
		if e.Op == OpWrite && (e.Outcome != Fail || e.Stale) {
			out = append(out, opOf(e, model.Write))
		}
	}
	return out
}

func opOf(e Event, k model.Kind) model.Op {
	detail := fmt.Sprintf("client %d", e.Client)
	if e.Gateway >= 0 {
		detail += fmt.Sprintf(", gateway %d", e.Gateway)
	}
	if e.Status != 0 {
		detail += fmt.Sprintf(", status %d", e.Status)
	}
	return model.Op{Client: e.Client, Kind: k, Key: e.Resource, Lease: e.Lease, Invoke: e.Invoke, Complete: e.Complete,
		Outcome: map[Outcome]model.Outcome{Ok: model.Ok, Fail: model.Fail, Unknown: model.Unknown}[e.Outcome], Token: e.Token, Valid: e.ValidFor, Detail: detail}
}

// modelTimeout bounds one model check; a check that runs out of it is a
// failure of its own (the checker must finish each history in seconds).
const modelTimeout = 2 * time.Minute

// CheckModels checks the history's lock operations against model.Mutex,
// its writes against model.Store and its permit operations (of a
// semaphore of k permits) against model.Semaphore(k): each kind the
// history holds.
func CheckModels(events []Event, k int) []model.Result {
	var res []model.Result
	if l := LockOps(events); len(l) > 0 {
		res = append(res, model.Check("mutex", model.Mutex, model.History(l, false), modelTimeout))
	}
	if w := StoreOps(events); len(w) > 0 {
		res = append(res, model.Check("store", model.Store, model.History(w, true), modelTimeout))
	}
	if p := PermitOps(events); len(p) > 0 {
		res = append(res, model.Check(fmt.Sprintf("semaphore(%d)", k), model.Semaphore(k), model.History(p, false), modelTimeout))
	}
	return res
}

// CheckModelsOutside is CheckModels for a history with windows outside
// lockgate's stated model (see Outside). A mutex or semaphore check that
// rejects the history is made again with every acquire that overlaps a
// window marked Outside (rule M7 of package model): if the model then
// accepts the history, the strict rejection goes to outside (counted
// apart; it fails no test) and res holds the marked check under the same
// name; otherwise res holds the rejection. The store's rules do not hang
// on the clock and are never relaxed.
func CheckModelsOutside(events []Event, k int, w windows) (res, outside []model.Result) {
	res = CheckModels(events, k)
	if len(w) == 0 {
		return res, nil
	}
	for i, r := range res {
		var ops []model.Op
		var m porcupine.Model
		switch {
		case r.Verdict == porcupine.Ok:
			continue
		case r.Model == "mutex":
			ops, m = LockOps(events), model.Mutex
		case strings.HasPrefix(r.Model, "semaphore"):
			ops, m = PermitOps(events), model.Semaphore(k)
		default:
			continue
		}
		marked := false
		for j, o := range ops {
			end := o.Complete
			if o.Outcome == model.Unknown {
				end = model.Never
			}
			if o.Kind == model.Acquire && w.touches(o.Invoke, end) {
				ops[j].Outside, marked = true, true
			}
		}
		if !marked {
			continue
		}
		if relaxed := model.Check(r.Model, m, model.History(ops, false), modelTimeout); relaxed.Verdict == porcupine.Ok {
			outside = append(outside, r)
			res[i] = relaxed
		}
	}
	return res, outside
}

// modelTB is what reportModels needs of a test.
type modelTB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Name() string
}

// reportModels logs every result and fails t on a verdict other than Ok.
// For each such result it writes porcupine's history viewer to a
// directory kept after the test (LOCKGATE_CHAOS_DIR, or a new one under
// the system's temporary directory) and logs its path.
func reportModels(t modelTB, results []model.Result) {
	t.Helper()
	for _, r := range results {
		t.Logf("%v", r)
		if r.Verdict == "Ok" {
			continue
		}
		path, err := viewerPath(t.Name(), r.Model)
		if err == nil {
			err = r.Visualize(path)
		}
		if err != nil {
			t.Errorf("%v; history viewer not written: %v", r, err)
			continue
		}
		t.Errorf("%v: not linearizable (or not decided in %v); history viewer: %s", r, modelTimeout, path)
	}
}

func viewerPath(test, name string) (string, error) {
	dir := os.Getenv("LOCKGATE_CHAOS_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "lockgate-chaos-"); err != nil {
			return "", err
		}
	}
	clean := strings.NewReplacer("/", "_", "(", "", ")", "", " ", "_").Replace(test + "-" + name)
	return filepath.Join(dir, clean+".html"), nil
}

// expectIllegal fails t unless the named model check found the history
// not linearizable, and writes that history's viewer when
// LOCKGATE_CHAOS_DIR names a directory: it is how a test shows that the
// model checker catches a fault.
func expectIllegal(t modelTB, results []model.Result, name string) {
	t.Helper()
	for _, r := range results {
		if r.Model != name {
			continue
		}
		if r.Verdict != "Illegal" {
			t.Errorf("%v, want Illegal: the model checker missed the fault", r)
			return
		}
		if os.Getenv("LOCKGATE_CHAOS_DIR") == "" {
			t.Logf("as expected, %v (LOCKGATE_CHAOS_DIR=dir writes its history viewer)", r)
			return
		}
		path, err := viewerPath(t.Name(), r.Model)
		if err == nil {
			err = r.Visualize(path)
		}
		t.Logf("as expected, %v; history viewer: %s (%v)", r, path, err)
		return
	}
	t.Errorf("no %s model check among %d", name, len(results))
}
