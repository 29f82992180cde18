package chaos

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockgate/lockgate/fencing"
)

// Admission is one write the register was asked to make, in the order the
// register decided on it.
type Admission struct {
	Resource string
	Lease    string
	Token    uint64
	Value    string
	Admitted bool
	At       time.Duration
}

// Register is a fenced register per resource: a fencing.Memory store whose
// key is the resource name, plus a log of every decision in the order the
// store made them, for checker C3.
type Register struct {
	mem *fencing.Memory
	mu  sync.Mutex
	log []Admission
}

// NewRegister returns an empty register.
func NewRegister() *Register { return &Register{mem: fencing.NewMemory()} }

// Write stores value under resource if token is at least the highest token
// admitted for it, and logs the decision. It returns nil when the write was
// admitted and an error matching fencing.ErrStaleToken when it was refused.
func (g *Register) Write(ctx context.Context, resource, lease string, token uint64, value string, at time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.mem.Put(ctx, resource, resource, token, []byte(value))
	if err != nil && !errors.Is(err, fencing.ErrStaleToken) {
		return err
	}
	g.log = append(g.log, Admission{Resource: resource, Lease: lease, Token: token, Value: value, Admitted: err == nil, At: at})
	return err
}

// Log returns the decisions made so far, in order.
func (g *Register) Log() []Admission {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Admission(nil), g.log...)
}

// Finals returns the value each written resource holds now.
func (g *Register) Finals(ctx context.Context) map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string)
	for _, a := range g.log {
		if _, done := out[a.Resource]; done {
			continue
		}
		if rec, err := g.mem.Get(ctx, a.Resource); err == nil {
			out[a.Resource] = string(rec.Value)
		}
	}
	return out
}
