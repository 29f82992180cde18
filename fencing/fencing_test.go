package fencing_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/fencing"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want uint64
		err  error
	}{
		{"one is the smallest token", "1", 1, nil},
		{"a plain decimal parses", "42", 42, nil},
		{"2^53-1 is the largest token", "9007199254740991", fencing.MaxToken, nil},
		{"an empty value is missing", "", 0, fencing.ErrMissingToken},
		{"zero is invalid", "0", 0, fencing.ErrInvalidToken},
		{"2^53 is invalid", "9007199254740992", 0, fencing.ErrInvalidToken},
		{"a 17-digit number is invalid", "10000000000000000", 0, fencing.ErrInvalidToken},
		{"2^64 is invalid", "18446744073709551616", 0, fencing.ErrInvalidToken},
		{"leading zeros are invalid", "007", 0, fencing.ErrInvalidToken},
		{"a plus sign is invalid", "+5", 0, fencing.ErrInvalidToken},
		{"a minus sign is invalid", "-5", 0, fencing.ErrInvalidToken},
		{"spaces are invalid", " 5", 0, fencing.ErrInvalidToken},
		{"hex is invalid", "0x10", 0, fencing.ErrInvalidToken},
		{"an exponent is invalid", "1e3", 0, fencing.ErrInvalidToken},
		{"a fraction is invalid", "5.0", 0, fencing.ErrInvalidToken},
		{"a quoted token is invalid", `"5"`, 0, fencing.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fencing.ParseToken(tt.in)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("ParseToken(%q) error = %v, want %v", tt.in, err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("ParseToken(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestCheckToken(t *testing.T) {
	tests := []struct {
		token uint64
		ok    bool
	}{
		{0, false}, {1, true}, {fencing.MaxToken, true}, {fencing.MaxToken + 1, false}, {1<<64 - 1, false},
	}
	for _, tt := range tests {
		err := fencing.CheckToken(tt.token)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, fencing.ErrInvalidToken)) {
			t.Errorf("CheckToken(%d) = %v, want ok=%v", tt.token, err, tt.ok)
		}
	}
}

func TestCheckNames(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"a short name", "orders", true},
		{"punctuation and non-ASCII letters", "{a}:b/c ключ", true},
		{"exactly MaxNameLen bytes", strings.Repeat("x", fencing.MaxNameLen), true},
		{"an empty name", "", false},
		{"one byte too long", strings.Repeat("x", fencing.MaxNameLen+1), false},
		{"invalid UTF-8", "a\xffb", false},
		{"a NUL byte", "a\x00b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := fencing.CheckResource(tt.in); tt.ok != (err == nil) || (err != nil && !errors.Is(err, fencing.ErrInvalidResource)) {
				t.Errorf("CheckResource = %v, want ok=%v", err, tt.ok)
			}
			if err := fencing.CheckKey(tt.in); tt.ok != (err == nil) || (err != nil && !errors.Is(err, fencing.ErrInvalidKey)) {
				t.Errorf("CheckKey = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestStaleTokenErrorMatches(t *testing.T) {
	var err error = &fencing.StaleTokenError{Resource: "orders", Token: 5, Highest: 7}
	wrapped := fmt.Errorf("saving order: %w", err)
	if !errors.Is(wrapped, fencing.ErrStaleToken) {
		t.Error("a wrapped *StaleTokenError does not match ErrStaleToken")
	}
	if errors.Is(wrapped, fencing.ErrInvalidToken) {
		t.Error("a *StaleTokenError matches ErrInvalidToken")
	}
	var se *fencing.StaleTokenError
	if !errors.As(wrapped, &se) || se.Highest != 7 {
		t.Errorf("errors.As gave %+v", se)
	}
	for _, want := range []string{"orders", "5", "7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not mention %q", err, want)
		}
	}
}
