package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockgate/lockgate/api"
)

// This file puts the contract's refusals in the contract's words: which
// character of a name is not allowed, that a limit is 200, that a header
// came twice, instead of a regular expression or a Go decoder's message.

// patternReason explains why value breaks the pattern of field, for the
// fields whose pattern is a set of characters and a length: the resource
// name (and the listing's prefix), Lease-Id and If-Match. A lease id is a
// secret: its characters are never quoted, only their count and positions.
// ok is false for other fields.
func patternReason(field string, value any) (string, bool) {
	s, isString := value.(string)
	if !isString {
		return "", false
	}
	if field == "resource" || field == "resources" {
		// The router hands on the escaped path segment.
		if u, err := url.PathUnescape(s); err == nil {
			s = u
		}
	}
	switch field {
	case "resource":
		return charsReason(s, 1, 200, "A-Z a-z 0-9 . _ - :", nameChar, true), true
	case "resources":
		// A lock set's members are checked one by one (an array in
		// simple style): value is the member at fault.
		return "each member " + charsReason(s, 1, 200, "A-Z a-z 0-9 . _ - :", nameChar, true), true
	case "prefix":
		return charsReason(s, 0, 200, "A-Z a-z 0-9 . _ - :", nameChar, true), true
	case api.HeaderLeaseID:
		return charsReason(s, 16, 128, "A-Z a-z 0-9 - _", leaseChar, false), true
	case api.HeaderIfMatch:
		return `must be the holder's fencing token in double quotes, e.g. "42" (a whole number from 1, at most 16 digits)`, true
	}
	return "", false
}

func nameChar(c rune) bool  { return leaseChar(c) || c == '.' || c == ':' }
func leaseChar(c rune) bool { return c < utf8.RuneSelf && (isAlnum(byte(c)) || c == '-' || c == '_') }
func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// charsReason says how s breaks "min to max characters of set": its length,
// or its first character outside the set (quoted only when show).
func charsReason(s string, min, max int, set string, ok func(rune) bool, show bool) string {
	rule := fmt.Sprintf("must be %d to %d characters of %s", min, max, set)
	n := utf8.RuneCountInString(s)
	pos := 0
	for _, c := range s {
		pos++
		if ok(c) {
			continue
		}
		what := "a character that is not allowed"
		switch {
		case !show:
		case c == '/':
			what = "a slash (sent as / or %2F), which is not allowed"
		case c == ' ':
			what = "a space, which is not allowed"
		case c == utf8.RuneError:
			what = "a byte that is not UTF-8, which is not allowed"
		case c >= utf8.RuneSelf:
			what = fmt.Sprintf("%q (U+%04X), which is not allowed: only ASCII letters, digits and . _ - : are", c, c)
		default:
			what = fmt.Sprintf("%q, which is not allowed", c)
		}
		return fmt.Sprintf("%s (character %d is %s)", rule, pos, what)
	}
	switch {
	case n < min && n == 0:
		return rule + " (it is empty)"
	case n < min:
		return fmt.Sprintf("%s (it has %d)", rule, n)
	case n > max:
		return fmt.Sprintf("%s (it has %d, over the limit of %d)", rule, n, max)
	}
	return rule
}

// repeatedHeaders are request headers that must come at most once: two
// Lease-Id or If-Match headers are refused, as fencing refuses a repeated
// Fencing-Token, rather than one of them being used.
var repeatedHeaders = []string{http.CanonicalHeaderKey(api.HeaderLeaseID), http.CanonicalHeaderKey(api.HeaderIfMatch)}

// repeatedHeader returns the name of a header of repeatedHeaders that op
// takes and r has more than once, and how many times; "" if none.
func repeatedHeader(r *http.Request, op *openapi3.Operation) (string, int) {
	for _, h := range repeatedHeaders {
		if n := len(r.Header[h]); n > 1 && op.Parameters.GetByInAndName(openapi3.ParameterInHeader, h) != nil {
			return h, n
		}
	}
	return "", 0
}

// wholeNumbers rewrites the numbers of a JSON body that are whole but
// written with an exponent or a fraction (1e4, 10000.0) as integers: the
// contract's "integer" admits them (JSON Schema counts values, not
// spellings), and encoding/json would refuse them for an int64. It returns
// nil when the body has no such number or does not decode.
func wholeNumbers(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	changed := false
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		case json.Number:
			if !strings.ContainsAny(string(t), ".eE") {
				return t
			}
			f, _, err := big.ParseFloat(string(t), 10, 256, big.ToNearestEven)
			if err != nil || !f.IsInt() {
				return t
			}
			i, _ := f.Int(nil)
			changed = true
			return json.Number(i.String())
		}
		return x
	}
	v = walk(v)
	if !changed {
		return nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return out
}

// typeReason words a JSON value of the wrong type for a field, as the
// contract states the type, without Go's names for it.
func typeReason(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "must be a whole number (an integer) within its range"
	case reflect.String:
		return "must be a string"
	case reflect.Bool:
		return "must be true or false"
	}
	return "has the wrong type"
}

// rereadAll returns the whole body a bodyReader holds.
func rereadAll(b *bodyReader) []byte {
	_, _ = b.Seek(0, io.SeekStart)
	out, _ := io.ReadAll(b)
	return out
}
