package walkthrough

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tokens pairs the fencing tokens a document shows with those answered,
// for a walkthrough whose tokens come from the gateway.
type tokens struct {
	gateway bool
	pairs   map[string]int64 // shown → answered
}

// pair records that the document's token shown stands for answered.
func (tk *tokens) pair(shown string, answered string) string {
	a, err := strconv.ParseInt(answered, 10, 64)
	if err != nil {
		return fmt.Sprintf("token %q is not a number", answered)
	}
	if prev, ok := tk.pairs[shown]; ok && prev != a {
		return fmt.Sprintf("the docs show token %s again, but the answer has %d where it had %d", shown, a, prev)
	}
	tk.pairs[shown] = a
	return ""
}

// orderErrors says where the answered tokens are not ordered as the
// document's are (equal where equal, rising where rising).
func (tk *tokens) orderErrors() []string {
	shown := make([]string, 0, len(tk.pairs))
	for s := range tk.pairs {
		shown = append(shown, s)
	}
	slices.SortFunc(shown, func(a, b string) int {
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		return int(min(max(x-y, -1), 1))
	})
	var out []string
	for i := 1; i < len(shown); i++ {
		if tk.pairs[shown[i]] <= tk.pairs[shown[i-1]] {
			out = append(out, fmt.Sprintf("the docs show token %s above token %s, but the answer's %d is not above %d",
				shown[i], shown[i-1], tk.pairs[shown[i]], tk.pairs[shown[i-1]]))
		}
	}
	return out
}

func (tk *tokens) actual() []int64 {
	var v []int64
	for _, a := range tk.pairs {
		v = append(v, a)
	}
	slices.Sort(v)
	return v
}

// compareStep returns the differences between a step's answer and the
// one its document shows.
func compareStep(r Result, tk *tokens) []string {
	var d []string
	if r.Stderr != "" {
		d = append(d, "it wrote to stderr: "+strings.TrimSpace(r.Stderr))
	}
	shown := r.Step.Shown
	if shown == "" {
		return d
	}
	actual := strings.TrimRight(r.Output, "\n")
	if !strings.HasPrefix(shown, "HTTP/") {
		return append(d, compareBody(shown, actual, false, tk)...)
	}
	return append(d, compareHTTP(shown, r.Step.Inline, actual, tk)...)
}

var headerLine = regexp.MustCompile(`^([A-Za-z0-9-]+): (.*)$`)

type header struct{ name, value string }

// compareHTTP compares an answer shown with its status line (curl -i):
// the status line, every header shown (headers not shown are not
// compared: the documents leave out Date, Content-Length, Request-Id and
// the like) and the body.
func compareHTTP(shown string, inline bool, actual string, tk *tokens) []string {
	if !strings.HasPrefix(actual, "HTTP/") {
		return []string{"the docs show an HTTP status line, the answer has none"}
	}
	// The document's answer: status line, headers, an optional "…" line
	// for headers left out, and the body.
	lines := strings.Split(shown, "\n")
	status, fragment := lines[0], ""
	if s, rest, ok := strings.Cut(status, "…"); ok {
		status, fragment = strings.TrimSpace(s), strings.TrimSpace(rest)
	}
	var hs []header
	var body []string
	inBody := false
	for _, l := range lines[1:] {
		switch {
		case inBody:
			body = append(body, l)
		case l == "":
			inBody = true
		case l == "…": // headers left out
		case headerLine.MatchString(l):
			m := headerLine.FindStringSubmatch(l)
			hs = append(hs, header{m[1], m[2]})
		default:
			inBody = true
			body = append(body, l)
		}
	}

	alines := strings.Split(actual, "\n")
	var d []string
	if strings.TrimSpace(alines[0]) != status {
		d = append(d, fmt.Sprintf("status line %q, the docs show %q", alines[0], status))
	}
	got := map[string]string{}
	var abody []string
	for i := 1; i < len(alines); i++ {
		if alines[i] == "" {
			abody = alines[i+1:]
			break
		}
		n, v, _ := strings.Cut(alines[i], ": ")
		got[strings.ToLower(n)] = v
	}
	for _, h := range hs {
		n := strings.ToLower(h.name)
		v, ok := got[n]
		if !ok {
			d = append(d, fmt.Sprintf("no %s header; the docs show %q", h.name, h.value))
			continue
		}
		if e := compareValue(n, h.value, v, tk); e != "" {
			d = append(d, fmt.Sprintf("header %s: %s", h.name, e))
		}
	}
	answered := strings.Join(abody, "\n")
	switch {
	case fragment != "":
		d = append(d, compareBody(fragment, answered, true, tk)...)
	case len(body) > 0:
		d = append(d, compareBody(strings.Join(body, "\n"), answered, false, tk)...)
	case !inline && answered != "":
		d = append(d, fmt.Sprintf("a body %q; the docs show none", answered))
	}
	return d
}

// member is "key":value in a JSON object as a document shows it (with
// ellipses, so not always JSON).
var member = regexp.MustCompile(`"([a-z_]+)":("(?:[^"\\]|\\.)*"|[-0-9.eE+]+|true|false|null)`)

var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// compareBody compares a shown body with the answered one: member by
// member for a JSON object, else as text. fragment says the docs show part
// of the body only.
func compareBody(shown, actual string, fragment bool, tk *tokens) []string {
	ms := member.FindAllStringSubmatch(shown, -1)
	if len(ms) == 0 {
		if numbersOnly.MatchString(shown) {
			if strings.Join(strings.Fields(actual), " ") != shown {
				return []string{fmt.Sprintf("answer %q; the docs show %q", actual, shown)}
			}
			return nil
		}
		if e := match(shown, actual, tk); e != "" {
			return []string{"body: " + e}
		}
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(actual), &obj); err != nil {
		return []string{fmt.Sprintf("the docs show a JSON object, the answer is not one (%v)", err)}
	}
	var d []string
	seen := map[string]bool{}
	for _, m := range ms {
		key, raw := m[1], m[2]
		seen[key] = true
		a, ok := obj[key]
		if !ok {
			d = append(d, fmt.Sprintf("no member %q; the docs show %s", key, raw))
			continue
		}
		var sv, av string
		if strings.HasPrefix(raw, `"`) {
			if err := json.Unmarshal([]byte(raw), &sv); err != nil {
				sv = strings.Trim(raw, `"`)
			}
			if err := json.Unmarshal(a, &av); err != nil {
				d = append(d, fmt.Sprintf("member %q is %s, the docs show a string", key, a))
				continue
			}
		} else {
			sv, av = raw, string(a)
		}
		if e := compareValue(key, sv, av, tk); e != "" {
			d = append(d, fmt.Sprintf("member %q: %s", key, e))
		}
	}
	// Members the docs do not show, unless they leave some out ("…"
	// outside a string).
	if !fragment && !strings.Contains(quoted.ReplaceAllString(shown, `""`), "…") {
		for k := range obj {
			if !seen[k] {
				d = append(d, fmt.Sprintf("member %q (%s) is not shown in the docs", k, obj[k]))
			}
		}
	}
	return d
}

var leaseID = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// compareValue compares one shown value (of a member or a header, named
// key) with the answered one; "" when they agree.
func compareValue(key, shown, actual string, tk *tokens) string {
	switch strings.ReplaceAll(strings.ToLower(key), "-", "_") {
	case "lease_id": // chosen at random by the walkthrough or the gateway
		if !leaseID.MatchString(actual) {
			return fmt.Sprintf("%q is not a lease id", actual)
		}
		return ""
	case "expires_at", "granted_at":
		if _, err := time.Parse(time.RFC3339Nano, actual); err != nil {
			return fmt.Sprintf("%q is not a time: %v", actual, err)
		}
		return ""
	case "date":
		return ""
	case "validity_ms", "retry_after_ms", "retry_after": // time left: within 20 % below
		s, err1 := strconv.ParseFloat(shown, 64)
		a, err2 := strconv.ParseFloat(actual, 64)
		if err1 != nil || err2 != nil || a < 0.8*s || a > s*1.01+2 {
			return fmt.Sprintf("%s, the docs show %s (time left: within 20 %% below it)", actual, shown)
		}
		return ""
	}
	return match(shown, actual, tk)
}

var longNumber = regexp.MustCompile(`[0-9]{10,}`)

// match compares shown text with actual: "…" stands for anything, and in
// a walkthrough on the gateway a number of 10 digits or more is a fencing
// token, compared by its relations (tk).
func match(shown, actual string, tk *tokens) string {
	var pattern strings.Builder
	var nums []string
	pattern.WriteString(`^`)
	for i, part := range strings.Split(shown, "…") {
		if i > 0 {
			pattern.WriteString(`(?s:.*?)`)
		}
		if !tk.gateway {
			pattern.WriteString(regexp.QuoteMeta(part))
			continue
		}
		last := 0
		for _, loc := range longNumber.FindAllStringIndex(part, -1) {
			pattern.WriteString(regexp.QuoteMeta(part[last:loc[0]]))
			pattern.WriteString(`([0-9]+)`)
			nums = append(nums, part[loc[0]:loc[1]])
			last = loc[1]
		}
		pattern.WriteString(regexp.QuoteMeta(part[last:]))
	}
	pattern.WriteString(`$`)
	m := regexp.MustCompile(pattern.String()).FindStringSubmatch(actual)
	if m == nil {
		return fmt.Sprintf("%q, the docs show %q", actual, shown)
	}
	for i, n := range nums {
		if e := tk.pair(n, m[i+1]); e != "" {
			return e
		}
	}
	return ""
}
