// Package walkthrough reads the walkthroughs of the project's Markdown
// documents (their fenced sh blocks, with the answers shown next to them),
// pastes them into bash against a running gateway and store, and compares
// every answer with the one the document shows.
//
// A walkthrough is every sh block under one heading, in order, except the
// blocks that only start something (listed in Skipped with the reason).
// Any other sh block is run: a new sh block in a document is pasted by the
// tests whether or not its author thought of them. A command with a
// here-document is one step with its text (a script saved to a file).
//
// A walkthrough may start background processes (cmd &, with set -m each
// in a process group of its own, as in a terminal) and kill them: the
// shell's notices of jobs that ended ("[2]+ Done …", "… Killed …") are not
// answers. It must stop every process it started: one still running when
// the paste ends is a failure (and is killed, with its process group).
// TMPDIR is a directory of the paste's own, removed after it.
//
// An answer shown for a command is, in the document's own forms:
//   - a plain ``` block right after the sh block: the answer of its last
//     command;
//   - a trailing comment on the command's line that starts with "HTTP/" or
//     "{", or is only numbers ("# 1 5", a redis-cli answer);
//   - comment lines right after the command (no blank line between) whose
//     first starts with "HTTP/" or "{"; the lines after it continue it.
//
// Compared are the status line, each header shown (headers a document
// leaves out, such as Date, Content-Length or Request-Id, are not), and
// the body: a JSON object member by member, where a member not shown is a
// difference unless an ellipsis (…) stands among the members; other text
// as written. An ellipsis stands for anything. What legitimately differs
// from run to run is compared by its shape: lease ids, timestamps, the
// time left (validity_ms, retry_after_ms, Retry-After: at most 20 % below
// the value shown); and the fencing tokens of a walkthrough that talks to
// the gateway by their relations only (equal where the document shows
// equal tokens, ordered as the document orders them; across two pastes,
// rising), since the embedded store starts them from the clock and Redis
// nodes from 1. A command that fails, or writes to stderr, is a
// difference too.
package walkthrough

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Walkthrough is the runnable sh blocks under one heading of a document.
type Walkthrough struct {
	// Doc is the document's path relative to the repository's root.
	Doc string
	// Heading is the text of the heading the blocks are under.
	Heading string
	// Line is the line of the first block's opening fence.
	Line int
	// Steps are the commands, in order.
	Steps []Step
	// FreshStore is set when the document says the walkthrough's answers
	// are those of a fresh fencedkv (see Fresh): it cannot be pasted twice
	// on one store under the same key.
	FreshStore bool
}

// Step is one command of a walkthrough (continuation lines joined).
type Step struct {
	// Line is the line of the command in the document.
	Line int
	// Command is the command as the document has it.
	Command string
	// Shown is the answer the document shows for it, "" if none; Inline
	// says it was a one-line comment, which shows a status line or a
	// fragment, never a whole answer.
	Shown  string
	Inline bool
}

// Skipped lists the sh blocks that are not walkthroughs, by the start of
// their first line, with the reason. The tests start the gateway and the
// store as these blocks say, and other tests cover the rest.
var Skipped = map[string]string{
	"go run ./cmd/lockgate":   "starts the gateway; the tests start it as written (no flags: the embedded store) or over the dev stack's Redis nodes",
	"go run ./cmd/fencedkv":   "starts the demo store; the tests start it as written",
	"go test ":                "the test commands themselves",
	"docker compose up":       "needs a Docker engine; TestComposeConfigIsValid checks the file and TestDevStack runs scripts/dev-stack",
	"scripts/dev-stack up":    "TestDevStack runs up, status and down",
	"lockgate run --gateway ": "./make-report stands for your own command; cmd/lockgate's run tests cover run",
	"go mod edit -require=github.com/lockgate/lockgate": "run in another module, beside a clone; client's TestTheClientBuildsInAnotherModule runs it",
	`redis-cli EVAL "$(cat deploy/redis/ready.lua)"`:    "a Redis pod's readiness probe; TestTheReadinessProbeFollowsRecovery runs the script on nodes in each state",
}

// Fresh lists the walkthroughs (document#heading) whose answers are those
// of a fresh store, with the sentence of the document that says so; Load
// fails if the sentence is gone.
var Fresh = map[string]string{
	"docs/fencing.md#A walk-through with fencedkv": "The answers below are those of a fresh fencedkv",
}

// Load reads the walkthroughs of the documents (paths relative to root),
// in the documents' order. It fails on a document it cannot read, a code
// block that never closes, an answer shown twice for one command, and a
// walkthrough listed in Fresh whose section no longer says so.
func Load(root string, docs ...string) ([]Walkthrough, error) {
	var all []Walkthrough
	for _, doc := range docs {
		ws, err := loadDoc(root, doc)
		if err != nil {
			return nil, err
		}
		all = append(all, ws...)
	}
	return all, nil
}

// LoadDocs is Load of every document Docs names.
func LoadDocs(root string) ([]Walkthrough, error) {
	docs, err := Docs(root)
	if err != nil {
		return nil, err
	}
	return Load(root, docs...)
}

// Docs returns README.md and every docs/*.md under root, the documents
// whose walkthroughs the tests paste.
func Docs(root string) ([]string, error) {
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	docs := []string{"README.md"}
	for _, m := range more {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			return nil, err
		}
		docs = append(docs, filepath.ToSlash(rel))
	}
	return docs, nil
}

var heading = regexp.MustCompile(`^#{1,6} (.+)$`)

func loadDoc(root, doc string) ([]Walkthrough, error) {
	raw, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(raw), "\n")
	var (
		out     []Walkthrough
		cur     *Walkthrough
		section string
		text    = map[string]*strings.Builder{} // section → its prose, for Fresh
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := heading.FindStringSubmatch(line); m != nil {
			section, cur = m[1], nil
			text[section] = &strings.Builder{}
			continue
		}
		if !strings.HasPrefix(line, "```") {
			if b := text[section]; b != nil {
				b.WriteString(line + "\n")
			}
			continue
		}
		lang := strings.TrimPrefix(line, "```")
		start := i
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s:%d: a code block that never closes", doc, start+1)
		}
		if lang != "sh" || skipped(body) {
			continue
		}
		steps := parseSteps(start+2, body)
		// A plain block right after it shows the last command's answer.
		if i+1 < len(lines) && lines[i+1] == "```" && len(steps) > 0 {
			var shown []string
			for i += 2; i < len(lines) && lines[i] != "```"; i++ {
				shown = append(shown, lines[i])
			}
			last := &steps[len(steps)-1]
			if last.Shown != "" {
				return nil, fmt.Errorf("%s:%d: the answer of %q is shown twice", doc, last.Line, last.Command)
			}
			last.Shown, last.Inline = strings.Join(shown, "\n"), false
		}
		if cur == nil {
			out = append(out, Walkthrough{Doc: doc, Heading: section, Line: start + 1})
			cur = &out[len(out)-1]
		}
		cur.Steps = append(cur.Steps, steps...)
	}
	for k, sentence := range Fresh {
		d, h, _ := strings.Cut(k, "#")
		if d != doc {
			continue
		}
		found := false
		for j := range out {
			if out[j].Heading == h {
				found = true
				out[j].FreshStore = true
			}
		}
		b := text[h]
		if !found || b == nil || !strings.Contains(strings.Join(strings.Fields(b.String()), " "), sentence) {
			return nil, fmt.Errorf("%s: section %q no longer says %q, which is why the tests paste it on a fresh store", doc, h, sentence)
		}
	}
	return out, nil
}

func skipped(body []string) bool {
	for _, l := range body {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for prefix := range Skipped {
			if strings.HasPrefix(l, prefix) {
				return true
			}
		}
		return false
	}
	return true // only comments
}

// hereDoc is a here-document's operator in a command: <<WORD, <<-WORD,
// <<'WORD' or <<"WORD".
var hereDoc = regexp.MustCompile(`<<(-?) *['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

var numbersOnly = regexp.MustCompile(`^[0-9]+( [0-9]+)*$`)

// looksLikeAnswer reports whether a comment's text is an answer rather
// than a description.
func looksLikeAnswer(c string) bool {
	return strings.HasPrefix(c, "HTTP/") || strings.HasPrefix(c, "{") || numbersOnly.MatchString(c)
}

// parseSteps splits an sh block into commands and the answers shown in
// its comments. first is the document line of body[0].
func parseSteps(first int, body []string) []Step {
	var steps []Step
	for i := 0; i < len(body); i++ {
		t := strings.TrimSpace(body[i])
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		s := Step{Line: first + i}
		cmd := body[i]
		for strings.HasSuffix(cmd, "\\") && i+1 < len(body) {
			i++
			cmd += "\n" + body[i]
		}
		code, comment := splitComment(cmd)
		// A here-document is part of its command: its lines, to the
		// delimiter, are text (a script saved to a file), not steps.
		if m := hereDoc.FindStringSubmatch(code); m != nil {
			for i+1 < len(body) {
				i++
				cmd += "\n" + body[i]
				if body[i] == m[2] || m[1] == "-" && strings.TrimLeft(body[i], "\t") == m[2] {
					break
				}
			}
		}
		s.Command = strings.TrimRight(cmd, " ")
		if looksLikeAnswer(comment) {
			s.Shown, s.Inline = comment, true
		}
		// Comment lines right after the command, starting with an answer.
		if i+1 < len(body) && s.Shown == "" {
			if c := commentText(body[i+1]); c != "" && looksLikeAnswer(c) && !numbersOnly.MatchString(c) {
				var shown []string
				for i+1 < len(body) && strings.HasPrefix(strings.TrimSpace(body[i+1]), "#") {
					i++
					shown = append(shown, commentText(body[i]))
				}
				s.Shown = strings.Join(shown, "\n")
			}
		}
		steps = append(steps, s)
	}
	return steps
}

func commentText(line string) string {
	t := strings.TrimSpace(line)
	if !strings.HasPrefix(t, "#") {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(t, "#"))
}

// splitComment splits a shell line at a comment: a # after white space,
// outside quotes.
func splitComment(line string) (code, comment string) {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case quote == '"':
			if c == '\\' {
				i++
			} else if c == '"' {
				quote = 0
			}
		case c == '\\':
			i++
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && i > 0 && (line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], strings.TrimSpace(line[i+1:])
		}
	}
	return line, ""
}
