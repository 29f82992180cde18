package lockgate_test

import (
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// slug is the anchor GitHub gives a Markdown heading.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// Every problem type the code can answer (a urn:lockgate:problem: literal
// in any non-test Go file) is described under a heading of
// docs/operations.md or docs/fencing.md whose anchor is its name, as both
// documents promise.
func TestEveryProblemTypeIsDocumentedWithAnAnchor(t *testing.T) {
	anchors := map[string]bool{}
	heading := regexp.MustCompile(`(?m)^#{2,4} (.+)$`)
	for _, doc := range []string{"docs/operations.md", "docs/fencing.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
			anchors[slug(m[1])] = true
		}
	}
	urn := regexp.MustCompile(`"urn:lockgate:problem:([a-z0-9-]+)"`)
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bench") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range urn.FindAllStringSubmatch(string(b), -1) {
			found++
			if !anchors[m[1]] {
				t.Errorf("%s: problem type %s has no heading with anchor #%s in docs/operations.md or docs/fencing.md", path, m[1], m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 {
		t.Errorf("found only %d problem types in the code: is the search broken?", found)
	}
}

// citingDocs are the documents whose citations of tests and commits
// TestCitedTestsAndCommitsExist checks.
func citingDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md", "RELIABILITY.md", "BENCHMARKS.md"}, docs...)
}

// Every test a document cites (a Test… name) is a func of some _test.go
// file of the repository, and every commit it cites (7 to 12 hex digits,
// or 40) is in the repository's history, so that a reader can run the
// one and read the other. A name a document defines itself (an example's
// func TestX) is its own. Commits are looked up with git: the test needs
// git and the history (CI's clone has both) and fails, naming what is
// missing, without them.
func TestCitedTestsAndCommitsExist(t *testing.T) {
	defined := map[string]bool{}
	funcTest := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcTest.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !defined["TestCitedTestsAndCommitsExist"] {
		t.Fatal("the walk over *_test.go found not even this test")
	}

	testName := regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)
	commit := regexp.MustCompile(`\b(?:[0-9a-f]{7,12}|[0-9a-f]{40})\b`)
	letter, digit := regexp.MustCompile(`[a-f]`), regexp.MustCompile(`[0-9]`)
	commits := map[string][]string{} // hash: the documents citing it
	for _, doc := range citingDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		own := map[string]bool{}
		for _, m := range funcTest.FindAllStringSubmatch(string(b), -1) {
			own[m[1]] = true
		}
		for _, name := range testName.FindAllString(string(b), -1) {
			if !defined[name] && !own[name] {
				t.Errorf("%s cites %s: no func %s in any _test.go", doc, name, name)
				own[name] = true // once per document
			}
		}
		// A hash has digits and letters; a word of a-f alone ("deface")
		// or a number is not one.
		for _, h := range commit.FindAllString(string(b), -1) {
			if letter.MatchString(h) && digit.MatchString(h) && !slices.Contains(commits[h], doc) {
				commits[h] = append(commits[h], doc)
			}
		}
	}
	if len(commits) == 0 {
		return
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("%d commits are cited (%v) and git, needed to look them up, is not in PATH: %v", len(commits), slices.Sorted(maps.Keys(commits)), err)
	}
	for _, h := range slices.Sorted(maps.Keys(commits)) {
		out, err := exec.Command(git, "cat-file", "-t", h).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "commit" {
			t.Errorf("%v cite commit %s, which `git cat-file -t %s` does not find (%s; %v); a shallow clone lacks the history: fetch it (git fetch --unshallow)",
				commits[h], h, h, strings.TrimSpace(string(out)), err)
		}
	}
}
