package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxToken is the largest valid fencing token, 2^53-1. Tokens stay below
// 2^53 so that every token is exact as a JSON number in JavaScript and as a
// Lua number in Redis scripts, both of which are IEEE 754 doubles.
const MaxToken = 1<<53 - 1

// MaxNameLen is the longest resource or key name, in bytes, that the guards
// accept. It keeps names well inside PostgreSQL's btree index entry limit.
const MaxNameLen = 1024

var (
	// ErrStaleToken is matched (errors.Is) by every *StaleTokenError: the
	// token is lower than one already admitted for the resource.
	ErrStaleToken = errors.New("fencing: stale token")
	// ErrInvalidToken means a token is outside 1..MaxToken or is not written
	// as a plain decimal integer.
	ErrInvalidToken = errors.New("fencing: invalid token")
	// ErrMissingToken means a request carried no token at all.
	ErrMissingToken = errors.New("fencing: missing token")
	// ErrInvalidResource means a resource name is empty, longer than
	// MaxNameLen bytes, not valid UTF-8, or contains a NUL byte.
	ErrInvalidResource = errors.New("fencing: invalid resource")
	// ErrInvalidKey means a key name breaks the same rules as a resource name.
	ErrInvalidKey = errors.New("fencing: invalid key")
	// ErrNotFound means no value has been written under a key.
	ErrNotFound = errors.New("fencing: not found")
)

// StaleTokenError reports a refused write: Token is lower than Highest, the
// highest token already admitted for Resource. It matches ErrStaleToken.
type StaleTokenError struct {
	Resource string
	Token    uint64
	Highest  uint64
}

// Error describes the refusal; it names the resource and both tokens.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencing: stale token %d for resource %q: token %d was already admitted",
		e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStaleToken, so errors.Is(err,
// ErrStaleToken) holds for every *StaleTokenError.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Guard admits writes for a resource in token order.
//
// Admit atomically compares token with the highest token admitted so far for
// resource: if token is greater or equal it records token (the highest
// becomes token) and returns nil; otherwise it records nothing and returns a
// *StaleTokenError. It returns ErrInvalidToken for tokens outside
// 1..MaxToken and ErrInvalidResource for bad names, in both cases without
// recording anything; other errors come from the guard's storage and leave
// it unknown whether the token was recorded.
//
// Admit alone does not protect a write made afterwards in a separate step;
// see the package documentation.
type Guard interface {
	Admit(ctx context.Context, resource string, token uint64) error
}

// Record is a value written through a fenced Put: the token that wrote it
// and the resource whose fence admitted that token.
type Record struct {
	Key      string
	Resource string
	Token    uint64
	Value    []byte
}

// CheckToken returns nil if token is in 1..MaxToken and an error matching
// ErrInvalidToken otherwise.
func CheckToken(token uint64) error {
	if token == 0 || token > MaxToken {
		return fmt.Errorf("%w: %d is outside 1..%d", ErrInvalidToken, token, uint64(MaxToken))
	}
	return nil
}

// ParseToken parses a token written as a decimal integer without sign,
// leading zeros or spaces, such as the value of a Fencing-Token header. It
// returns ErrMissingToken for an empty string and an error matching
// ErrInvalidToken for anything else that is not a token in 1..MaxToken.
func ParseToken(s string) (uint64, error) {
	if s == "" {
		return 0, ErrMissingToken
	}
	if len(s) > 16 || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("%w: %q is not a decimal integer in 1..%d", ErrInvalidToken, s, uint64(MaxToken))
	}
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a decimal integer in 1..%d", ErrInvalidToken, s, uint64(MaxToken))
	}
	if err := CheckToken(tok); err != nil {
		return 0, err
	}
	return tok, nil
}

// CheckResource returns nil if name is usable as a resource name and an error
// matching ErrInvalidResource otherwise: names are 1..MaxNameLen bytes of
// valid UTF-8 without NUL bytes (PostgreSQL text cannot hold NUL).
func CheckResource(name string) error {
	if why := badName(name); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidResource, why)
	}
	return nil
}

// CheckKey is CheckResource for key names; its error matches ErrInvalidKey.
func CheckKey(name string) error {
	if why := badName(name); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidKey, why)
	}
	return nil
}

func badName(name string) string {
	switch {
	case name == "":
		return "name is empty"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("name is %d bytes, longer than %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return "name contains a NUL byte"
		}
	}
	return ""
}

// CheckWrite validates the arguments of a fenced write: it returns the
// error of CheckResource, CheckKey or CheckToken for the first one that is
// wrong, or nil. Guards call it before touching their storage.
func CheckWrite(resource, key string, token uint64) error {
	if err := CheckResource(resource); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckToken(token)
}
