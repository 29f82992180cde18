package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// editLine is the start of the README's command that makes another module
// depend on a clone of this one.
const editLine = "go mod edit -require=github.com/lockgate/lockgate"

// TestTheClientBuildsInAnotherModule follows the README's "From another
// module" in a module of its own outside the repository, this repository
// standing for the clone (its path in place of ../lockgate): the README's
// go mod edit line, the go.mod lines the README shows, a main that imports
// the client, built and run; then go mod vendor, and a build from vendor/
// alone. Offline (GOPROXY=off, from the module cache): go mod tidy, which
// asks the network for the modules of the dependencies' tests, is stood in
// for by -mod=mod, and the checksum database by this repository's go.sum,
// whose checksums are those go mod tidy would have checked. The clone's
// packages compile from the repository's own directory, so the build cache
// serves most of them.
func TestTheClientBuildsInAnotherModule(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		if testing.Short() {
			t.Skip("needs the go tool; skipped under -short")
		}
		t.Fatal("go not found in PATH: this test builds a module with it (https://go.dev/dl)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var edit string
	var shown []string // the go.mod lines the README shows, as comments after the commands
	lines := strings.Split(string(readme), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, editLine) {
			edit = l
			for _, c := range lines[i+1:] {
				if c == "```" {
					break
				}
				if g, ok := strings.CutPrefix(c, "# "); ok {
					shown = append(shown, g)
				}
			}
			break
		}
	}
	if edit == "" || len(shown) != 2 {
		t.Fatalf("README.md: no %q line followed by the two go.mod lines it writes (found %q, %q)", editLine, edit, shown)
	}

	edit = strings.ReplaceAll(edit, "=../lockgate", "="+root)
	shown[1] = strings.ReplaceAll(shown[1], " => ../lockgate", " => "+root)
	app := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/app\n\ngo 1.26\n")
	write("main.go", `package main

import (
	"fmt"

	"github.com/lockgate/lockgate/client"
)

func main() {
	c, err := client.New("http://127.0.0.1:8080", nil)
	fmt.Println(c != nil, err)
}
`)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))

	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = app, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	args := strings.Fields(edit)
	run(append([]string{goTool}, args[1:]...)...)
	mod, err := os.ReadFile(filepath.Join(app, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range shown {
		// go mod edit writes a lone require or replace in its one-line form.
		if !strings.Contains(string(mod), "\n"+l+"\n") {
			t.Errorf("go.mod after %q has no line %q:\n%s", edit, l, mod)
		}
	}

	run(goTool, "build", "-o", "app", ".")
	if out := run(filepath.Join(app, "app")); out != "true <nil>\n" {
		t.Fatalf("the program printed %q, want \"true <nil>\"", out)
	}
	// Vendored, every package the program needs but the standard library's
	// comes from vendor/ (compiling them all again would add nothing).
	run(goTool, "mod", "vendor")
	vendor := filepath.Join(app, "vendor") + string(filepath.Separator)
	deps := run(goTool, "list", "-mod=vendor", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{end}}", ".")
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(deps), "\n") {
		path, dir, _ := strings.Cut(l, " ")
		if path == "example.com/app" {
			continue
		}
		n++
		if !strings.HasPrefix(dir, vendor) {
			t.Errorf("vendored, %s comes from %s, not from vendor/", path, dir)
		}
	}
	if n == 0 || !strings.Contains(deps, "github.com/lockgate/lockgate/client ") {
		t.Fatalf("vendored, the program's packages are:\n%s", deps)
	}
}
