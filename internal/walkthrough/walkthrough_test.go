package walkthrough

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeDoc(t *testing.T, root, name, text string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

const sample = "# Doc\n\n## Start\n\n```sh\ngo run ./cmd/lockgate\n```\n\n## Try it\n\n" +
	"```sh\n# 1. first\necho one  # {\"a\":1}\n\n# 2. second\nprintf 'HTTP/1.1 204 No Content\\r\\n' \\\n  | cat\n# HTTP/1.1 204 No Content\n\necho '{\"a\":2,\"b\":\"x\"}'\n```\n" +
	"```\n{\"a\":2,\"b\":\"x\"}\n```\n\n" +
	"```sh\necho 1 5   # 1 5\necho last\n# {\"a\":3,\n#  \"b\":\"y\"}\n```\n"

// The three forms of a shown answer are found, continuation lines joined,
// and a block that only starts something is left out.
func TestLoadFindsStepsAndTheirShownAnswers(t *testing.T) {
	root := t.TempDir()
	writeDoc(t, root, "README.md", sample)
	ws, err := Load(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Heading != "Try it" {
		t.Fatalf("walkthroughs %+v, want one under \"Try it\"", ws)
	}
	want := []struct{ cmd, shown string }{
		{`echo one  # {"a":1}`, `{"a":1}`},
		{"printf 'HTTP/1.1 204 No Content\\r\\n' \\\n  | cat", "HTTP/1.1 204 No Content"},
		{`echo '{"a":2,"b":"x"}'`, `{"a":2,"b":"x"}`},
		{"echo 1 5   # 1 5", "1 5"},
		{"echo last", "{\"a\":3,\n\"b\":\"y\"}"},
	}
	steps := ws[0].Steps
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d: %+v", len(steps), len(want), steps)
	}
	for i, w := range want {
		if !strings.HasPrefix(steps[i].Command, w.cmd) || steps[i].Shown != w.shown {
			t.Errorf("step %d: %q shown %q; want %q shown %q", i, steps[i].Command, steps[i].Shown, w.cmd, w.shown)
		}
	}
}

// A walkthrough pasted on a fresh store only must say so in its document.
func TestAFreshStoreWalkthroughMustSaySo(t *testing.T) {
	root := t.TempDir()
	body := "## A walk-through with fencedkv\n\nThe answers below are\nthose of a fresh fencedkv.\n\n```sh\necho hi\n```\n"
	writeDoc(t, root, "docs/fencing.md", body)
	ws, err := Load(root, "docs/fencing.md")
	if err != nil || len(ws) != 1 || !ws[0].FreshStore {
		t.Fatalf("with the sentence: %+v, %v", ws, err)
	}
	writeDoc(t, root, "docs/fencing.md", strings.Replace(body, "fresh", "running", 1))
	if _, err := Load(root, "docs/fencing.md"); err == nil || !strings.Contains(err.Error(), "fresh fencedkv") {
		t.Fatalf("without the sentence: %v", err)
	}
}

// Each kind of difference is found, and what legitimately differs is not
// one.
func TestCompareStep(t *testing.T) {
	const created = "HTTP/1.1 201 Created\nEtag: \"1795732509162001\"\nFencing-Token: 1795732509162001\nLease-Id: 562bfdf4c227afaeca25559c4d89a6b2\nRetry-After: 30\n\n" +
		`{"lease_id":"562bfdf4c227afaeca25559c4d89a6b2","fencing_token":1795732509162001,"ttl_ms":30000,"validity_ms":29697,"expires_at":"2026-11-22T07:09:42.108964228Z"}`
	answer := func(token, ttl, validity, retry string) string {
		return "HTTP/1.1 201 Created\nEtag: \"" + token + "\"\nFencing-Token: " + token + "\nLease-Id: 0123456789abcdef0123\nRetry-After: " + retry +
			"\nDate: Thu, 26 Nov 2026 22:56:12 GMT\n\n" +
			`{"lease_id":"0123456789abcdef0123","fencing_token":` + token + `,"ttl_ms":` + ttl + `,"validity_ms":` + validity + `,"expires_at":"2026-11-26T22:56:42.6Z"}`
	}
	for _, tc := range []struct {
		name, shown, output string
		inline, gateway     bool
		want                string // "" no difference, else part of it
	}{
		{"a Redis token, lease, time and validity that differ", created, answer("3", "30000", "29650", "30"), false, true, ""},
		{"a status line", created, strings.Replace(answer("3", "30000", "29650", "30"), "201 Created", "200 OK", 1), false, true, "status line"},
		{"a member's value", created, answer("3", "60000", "29650", "30"), false, true, `member "ttl_ms"`},
		{"the time left far below", created, answer("3", "30000", "9000", "30"), false, true, `member "validity_ms"`},
		{"Retry-After", created, answer("3", "30000", "29650", "9"), false, true, "header Retry-After"},
		{"two tokens shown equal, answered different", created, strings.Replace(answer("3", "30000", "29650", "30"), `"3"`, `"4"`, 1), false, true, "token 1795732509162001 again"},
		{"a member not shown", `{"a":1}`, `{"a":1,"b":2}`, false, false, `member "b"`},
		{"a member elided", `{"a":1, … }`, `{"a":1,"b":2}`, false, false, ""},
		{"a member missing", `{"a":1,"b":2}`, `{"a":1}`, false, false, `no member "b"`},
		{"a string with an ellipsis", `{"d":"token 5 is lower; …"}`, `{"d":"token 5 is lower; the lock passed"}`, false, false, ""},
		{"a literal token outside the gateway", `{"token":5}`, `{"token":6}`, false, false, `member "token"`},
		{"an inline status and fragment", `HTTP/1.1 200 OK … "fencing_token":1795732509162001`, "HTTP/1.1 200 OK\nA: b\n\n{\"fencing_token\":7,\"x\":1}", true, true, ""},
		{"a body the docs do not show", "HTTP/1.1 204 No Content", "HTTP/1.1 204 No Content\n\nsurprise", false, false, "a body"},
		{"a text body", "HTTP/1.1 200 OK\nFencing-Token: 7\n…\nfinal by client 2", "HTTP/1.1 200 OK\nFencing-Token: 7\nDate: x\n\nfinal by client 1", false, false, "body:"},
		{"numbers", "0 7", "0\n5\n", true, false, `"0 7"`},
		{"stderr", "", "", false, false, "stderr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Result{Step: Step{Shown: tc.shown, Inline: tc.inline}, Output: tc.output}
			if tc.name == "stderr" {
				r.Stderr = "curl: (7) Failed to connect"
			}
			tk := &tokens{gateway: tc.gateway, pairs: map[string]int64{}}
			d := strings.Join(append(compareStep(r, tk), tk.orderErrors()...), "\n")
			if tc.want == "" && d != "" || tc.want != "" && !strings.Contains(d, tc.want) {
				t.Errorf("differences %q, want %q", d, tc.want)
			}
		})
	}
}

// Tokens must keep the document's order: shown rising, answered rising.
func TestTokensKeepTheDocumentsOrder(t *testing.T) {
	tk := &tokens{gateway: true, pairs: map[string]int64{}}
	for _, p := range [][2]string{{"1795732509162001", "5"}, {"1795732509162002", "9"}, {"1795732509162001", "5"}} {
		if e := tk.pair(p[0], p[1]); e != "" {
			t.Fatal(e)
		}
	}
	if e := tk.orderErrors(); len(e) != 0 {
		t.Fatalf("rising tokens: %v", e)
	}
	if e := tk.pair("1795732509162003", "9"); e != "" {
		t.Fatal(e)
	}
	if e := tk.orderErrors(); len(e) != 1 || !strings.Contains(e[0], "1795732509162003 above token 1795732509162002") {
		t.Fatalf("a token answered equal where the docs show it higher: %v", e)
	}
}

// Check pastes a walkthrough twice with bash, names the document, the line
// and the paste of a difference, and names the step that failed.
func TestCheckPastesTwiceAndNamesTheStep(t *testing.T) {
	root := t.TempDir()
	writeDoc(t, root, "README.md", "## Paste\n\n```sh\nN=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $N >count\n"+
		"echo \"{\\\"paste\\\":$N}\"   # {\"paste\":1}\n```\n")
	ws, err := Load(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(t.Context(), ws[0], func(int) (Env, error) { return Env{Root: root}, nil })
	if err == nil || !strings.Contains(err.Error(), `README.md:5 ("Paste"), paste 2: member "paste": "2", the docs show "1"`) ||
		strings.Contains(err.Error(), "paste 1:") {
		t.Fatalf("the second paste answers differently: %v", err)
	}
	if res[0][1].Output != "{\"paste\":1}\n" || res[1][1].Output != "{\"paste\":2}\n" {
		t.Fatalf("outputs %q and %q", res[0][1].Output, res[1][1].Output)
	}

	writeDoc(t, root, "README.md", "## Fails\n\n```sh\necho fine\ncurl -s http://127.0.0.1:1/\necho never\n```\n")
	ws, err = Load(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(t.Context(), ws[0], Env{Root: root})
	if err == nil || !strings.Contains(err.Error(), "README.md:5: the step failed") || !strings.Contains(err.Error(), "curl -s http://127.0.0.1:1/") {
		t.Fatalf("a failing step: %v", err)
	}
}

// With RetryNoQuorum a no-quorum answer is asked again, and counted;
// without it, it is a difference.
func TestANoQuorumAnswerIsRetriedWhenAsked(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	// A curl that answers no-quorum twice, then the answer the doc shows.
	writeDoc(t, bin, "curl", "#!/bin/sh\nn=$(cat "+bin+"/n 2>/dev/null || echo 0); echo $((n+1)) >"+bin+"/n\n"+
		"if [ $n -lt 2 ]; then printf '%s' '{\"type\":\"urn:lockgate:problem:no-quorum\",\"status\":503}'; else printf '%s' '{\"ok\":true}'; fi\n")
	if err := os.Chmod(filepath.Join(bin, "curl"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeDoc(t, root, "README.md", "## Retry\n\n```sh\necho start\nX=$(curl -s localhost:8080/x); echo \"$X\"   # {\"ok\":true}\n```\n")
	ws, err := Load(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), ws[0], Env{Root: root, Path: []string{bin}, RetryNoQuorum: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := compareStep(res[1], &tokens{pairs: map[string]int64{}}); len(d) != 0 || res[1].Retried != 2 || res[0].Retried != 0 {
		t.Fatalf("retried %d (step 0: %d), differences %v; want 2 retries and none", res[1].Retried, res[0].Retried, d)
	}
	os.Remove(filepath.Join(bin, "n"))
	res, err = Run(t.Context(), ws[0], Env{Root: root, Path: []string{bin}})
	if err != nil {
		t.Fatal(err)
	}
	if d := compareStep(res[1], &tokens{pairs: map[string]int64{}}); len(d) == 0 || res[1].Retried != 0 {
		t.Fatalf("without RetryNoQuorum: retried %d, differences %v", res[1].Retried, d)
	}
}

// A here-document is one step with its text, whatever its lines look like;
// the walkthrough runs the script it saved.
func TestAHereDocumentIsPartOfItsStep(t *testing.T) {
	root := t.TempDir()
	writeDoc(t, root, "README.md", "## Script\n\n```sh\nS=$(mktemp)\ncat >\"$S\" <<'EOF'\n# {\"not\":\"an answer\"}\necho \"{\\\"from\\\":\\\"$1\\\"}\"\n\nexit 0\nEOF\nsh \"$S\" script   # {\"from\":\"script\"}\n```\n")
	ws, err := Load(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if s := ws[0].Steps; len(s) != 3 || !strings.HasSuffix(s[1].Command, "exit 0\nEOF") || s[1].Shown != "" || s[2].Shown != `{"from":"script"}` {
		t.Fatalf("steps %+v, want the mktemp, the cat with its here-document, and the sh", s)
	}
	if _, err := Check(t.Context(), ws[0], func(int) (Env, error) { return Env{Root: root}, nil }); err != nil {
		t.Fatal(err)
	}
}

// Background jobs may be started and killed (bash's notices of them are
// not answers); a job still running when the paste ends is a failure, and
// is stopped with its process group.
func TestBackgroundJobs(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name, block string
		want        string // "" no error, else part of it
	}{
		{"killed and waited for", "set -m\nsh -c 'sleep 60' & A=$!\nsh -c 'trap \"exit 0\" TERM; touch ready; sleep 60 & wait' & B=$!\nuntil [ -e ready ]; do sleep 0.01; done\nkill -9 -- -$A\nkill -- -$B; wait $B\necho '{\"a\":1}'   # {\"a\":1}\n", ""},
		{"without job control", "sh -c 'sleep 60' & A=$!\nkill -9 $A\necho done\n", ""},
		{"left running", "set -m\nsh -c 'echo $$ >pid.new; mv pid.new pid; sleep 60' >/dev/null & A=$!\nuntil [ -e pid ]; do sleep 0.01; done\n", "were still running when the paste ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeDoc(t, root, "README.md", "## Jobs\n\n```sh\n"+tc.block+"```\n")
			ws, err := Load(root, "README.md")
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(t.Context(), ws[0], Env{Root: root})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			for _, r := range res {
				if d := compareStep(r, &tokens{pairs: map[string]int64{}}); len(d) != 0 {
					t.Errorf("step %q: %v", r.Step.Command, d)
				}
			}
			if tc.want == "" {
				return
			}
			b, err := os.ReadFile(filepath.Join(root, "pid"))
			if err != nil {
				t.Fatal(err)
			}
			pid := strings.TrimSpace(string(b))
			if !stopped(pid) {
				t.Fatalf("the job left running (pid %s) was not stopped", pid)
			}
		})
	}
}

// stopped reports whether process pid has ended (gone, or a zombie that
// no one reaped yet), waiting for it up to 10 s.
func stopped(pid string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return true
		}
		// pid (comm) state ...: the state follows the last ')'.
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true
		}
	}
	return false
}
