package fencing

import (
	"bytes"
	"context"
	"sync"
)

// Memory is a Guard and fenced key-value store held in process memory. It is
// safe for concurrent use. It suits tests and single-process stores whose
// data lives in the same memory: its fences vanish with the process, so a
// store that outlives a restart must keep its fences where it keeps its data.
//
// The zero value is not usable; call NewMemory.
type Memory struct {
	mu     sync.Mutex
	fences map[string]uint64
	values map[string]Record
}

var _ Guard = (*Memory)(nil)

// NewMemory returns an empty Memory: no resource has admitted a token yet.
func NewMemory() *Memory {
	return &Memory{fences: make(map[string]uint64), values: make(map[string]Record)}
}

// Admit implements Guard. It returns ctx.Err() if ctx is already done,
// ErrInvalidResource or ErrInvalidToken for bad arguments, and a
// *StaleTokenError if token is lower than the highest admitted for resource.
func (m *Memory) Admit(ctx context.Context, resource string, token uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckResource(resource); err != nil {
		return err
	}
	if err := CheckToken(token); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.admitLocked(resource, token)
}

func (m *Memory) admitLocked(resource string, token uint64) error {
	if highest := m.fences[resource]; token < highest {
		return &StaleTokenError{Resource: resource, Token: token, Highest: highest}
	}
	m.fences[resource] = token
	return nil
}

// Put admits token for resource exactly as Admit does and, in the same
// critical section, stores value under key together with token and
// resource. A refused write changes nothing. Put copies value.
//
// Errors: ctx.Err(), ErrInvalidResource, ErrInvalidKey, ErrInvalidToken, or
// a *StaleTokenError.
func (m *Memory) Put(ctx context.Context, resource, key string, token uint64, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckWrite(resource, key, token); err != nil {
		return err
	}
	rec := Record{Key: key, Resource: resource, Token: token, Value: bytes.Clone(value)}
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.admitLocked(resource, token); err != nil {
		return err
	}
	m.values[key] = rec
	return nil
}

// Get returns a copy of the record last written under key by Put. It
// returns ctx.Err() if ctx is done, ErrInvalidKey for a bad name and
// ErrNotFound if nothing was written under key.
func (m *Memory) Get(ctx context.Context, key string) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	if err := CheckKey(key); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	rec, ok := m.values[key]
	m.mu.Unlock()
	if !ok {
		return Record{}, ErrNotFound
	}
	rec.Value = bytes.Clone(rec.Value)
	return rec, nil
}

// Highest returns the highest token admitted for resource, or 0 if none has
// been. It returns ctx.Err() if ctx is done and ErrInvalidResource for a bad
// name.
func (m *Memory) Highest(ctx context.Context, resource string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := CheckResource(resource); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fences[resource], nil
}
