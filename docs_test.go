package lockgate_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
