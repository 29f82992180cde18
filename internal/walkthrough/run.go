package walkthrough

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Env is where a walkthrough is pasted.
type Env struct {
	// Root is the working directory: the repository's root, where the
	// documents say to paste from.
	Root string
	// Gateway and Store are the host:port that replace localhost:8080 and
	// localhost:8081. LOCKGATE_URL is set to the gateway, for the CLI.
	Gateway, Store string
	// RedisPort is given to every redis-cli as -p; 0 leaves it as written.
	RedisPort int
	// Path is put first in PATH (where a lockgate binary is).
	Path []string
	// Rename, when both are set, replaces the word Rename[0] with
	// Rename[1] in the commands and in the answers shown: "another key",
	// for a walkthrough that needs a fresh store.
	Rename [2]string
	// RetryNoQuorum makes every curl of the pasted script retry, a second
	// apart and up to four times, an answer of type no-quorum (503), as
	// the docs tell clients to: over Redis nodes with a 50 ms node
	// timeout, a heavily loaded machine can miss the timeout, which says
	// nothing about the docs. No document shows such an answer. The
	// retries are counted in Result.Retried.
	RetryNoQuorum bool
}

// retryingCurl is the curl of a paste with Env.RetryNoQuorum: the real
// curl, run again when its answer is a no-quorum problem. It logs the step
// (never the arguments, which may hold a lease id) to $WALKTHROUGH_RETRIES.
const retryingCurl = `curl() {
  local i out rc
  for i in 1 2 3 4 5; do
    rc=0
    out=$(command curl "$@"; r=$?; printf x; exit $r) || rc=$?
    out=${out%x}
    if [ $i -lt 5 ] && [[ $out == *'"urn:lockgate:problem:no-quorum"'* ]]; then
      echo "$WALKTHROUGH_STEP" >>"$WALKTHROUGH_RETRIES"
      sleep 1
      continue
    fi
    printf '%s' "$out"
    return $rc
  done
}
`

// Result is the answer to one step.
type Result struct {
	// Step is the step as pasted: addresses rewritten, Rename applied to
	// its command and its shown answer.
	Step Step
	// Output and Stderr are what the command wrote (carriage returns
	// removed).
	Output, Stderr string
	// Took is the time from the step's start to the next one's.
	Took time.Duration
	// Retried counts the no-quorum answers retried (Env.RetryNoQuorum).
	Retried int
}

// rewrite turns a line of the document into the line pasted in env.
func (env Env) rewrite(s string) string {
	s = strings.ReplaceAll(s, "localhost:8080", env.Gateway)
	s = strings.ReplaceAll(s, "localhost:8081", env.Store)
	if env.RedisPort != 0 {
		s = regexp.MustCompile(`(^|[\s;|(])redis-cli `).ReplaceAllString(s, "${1}redis-cli -p "+strconv.Itoa(env.RedisPort)+" ")
	}
	return env.rename(s)
}

func (env Env) rename(s string) string {
	if env.Rename[0] == "" || env.Rename[1] == "" {
		return s
	}
	return regexp.MustCompile(`\b`+regexp.QuoteMeta(env.Rename[0])+`\b`).ReplaceAllString(s, env.Rename[1])
}

// Run pastes the walkthrough into one bash (-e) in env and returns each
// step's answer. It fails when bash does, naming the step that failed.
func Run(ctx context.Context, w Walkthrough, env Env) ([]Result, error) {
	dir, err := os.MkdirTemp("", "walkthrough-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	fmt.Fprintf(&script, leftRunning, quote(dir, "left"))
	if env.RetryNoQuorum {
		script.WriteString(retryingCurl)
	}
	results := make([]Result, len(w.Steps))
	for i, s := range w.Steps {
		s.Command = env.rewrite(s.Command)
		s.Shown = env.rename(s.Shown)
		results[i].Step = s
		fmt.Fprintf(&script, "WALKTHROUGH_STEP=%d; echo \"$EPOCHREALTIME\" >>%s\n{ %s\n} >%s 2>%s\n", i, quote(dir, "times"), s.Command,
			quote(dir, strconv.Itoa(i)+".out"), quote(dir, strconv.Itoa(i)+".err"))
	}
	fmt.Fprintf(&script, "echo \"$EPOCHREALTIME\" >>%s\n", quote(dir, "times"))

	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = env.Root
	// bash leads a process group, so that whatever it started is stopped
	// with it, also when ctx ends; background jobs of set -m have groups of
	// their own, which leftRunning stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "LOCKGATE_") && k != "PATH" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+strings.Join(append(env.Path, os.Getenv("PATH")), string(os.PathListSeparator)),
		"LOCKGATE_URL=http://"+env.Gateway, "WALKTHROUGH_RETRIES="+filepath.Join(dir, "retries"), "TMPDIR="+tmp)
	out, runErr := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what a job left behind
	}

	retries, _ := os.ReadFile(filepath.Join(dir, "retries"))
	for _, f := range strings.Fields(string(retries)) {
		if i, err := strconv.Atoi(f); err == nil && i < len(results) {
			results[i].Retried++
		}
	}
	times, _ := os.ReadFile(filepath.Join(dir, "times"))
	var stamps []float64
	for _, f := range strings.Fields(string(times)) {
		v, _ := strconv.ParseFloat(f, 64)
		stamps = append(stamps, v)
	}
	for i := range results {
		o, _ := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".out"))
		e, _ := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".err"))
		results[i].Output = strings.ReplaceAll(string(o), "\r", "")
		results[i].Stderr = jobNotice.ReplaceAllString(string(e), "")
		if i+1 < len(stamps) {
			results[i].Took = time.Duration((stamps[i+1] - stamps[i]) * float64(time.Second))
		}
	}
	if runErr != nil {
		failed := len(stamps) - 1 // the step that started last
		if failed >= 0 && failed < len(results) {
			r := results[failed]
			return results, fmt.Errorf("%s:%d: the step failed (%v):\n    %s\n    stderr: %s    output: %s%s",
				w.Doc, r.Step.Line, runErr, r.Step.Command, r.Stderr, r.Output, out)
		}
		return results, fmt.Errorf("%s:%d: bash: %v\n%s", w.Doc, w.Line, runErr, out)
	}
	if left, _ := os.ReadFile(filepath.Join(dir, "left")); len(left) > 0 {
		return results, fmt.Errorf("%s:%d: background processes %s were still running when the paste ended (now killed): a walkthrough stops what it starts",
			w.Doc, w.Line, strings.TrimSpace(string(left)))
	}
	return results, nil
}

// leftRunning, with the path of a file, kills the background jobs still
// running when the pasted script exits (half a second after it, so that a
// job just killed is not counted), each with its process group, and
// writes their process ids to the file.
const leftRunning = `walkthrough_left() {
  local p left=
  # A job just killed may not have ended yet: give it a moment.
  if [ -n "$(jobs -pr)" ]; then sleep 0.5; fi
  for p in $(jobs -pr); do
    left="$left $p"
    kill -9 -- -"$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true
  done
  if [ -n "$left" ]; then echo "$left" >>%s; fi
}
trap walkthrough_left EXIT
`

// jobNotice is a line in which bash reports a background job that ended
// ("[2]+  Done    sh x", "bash: line 3: 4242 Killed    sh x"): the shell's,
// not an answer of a command.
var jobNotice = regexp.MustCompile(`(?m)^(?:bash: (?:line [0-9]+: +)?[0-9]+ +|\[[0-9]+\][+-]? +)(?:Done|Killed|Terminated|Exit [0-9]+|Stopped|Hangup|Interrupt)\b.*(?:\n|$)`)

// quote is the path dir/name as one single-quoted shell word.
func quote(dir, name string) string {
	return "'" + strings.ReplaceAll(filepath.Join(dir, name), "'", `'\''`) + "'"
}

// talksToGateway reports whether the walkthrough's fencing tokens come
// from the gateway (and so are compared by their relations only).
func (w Walkthrough) talksToGateway() bool {
	for _, s := range w.Steps {
		if strings.Contains(s.Command, "localhost:8080") {
			return true
		}
	}
	return false
}

// Check pastes w twice in a row, the n-th time (1 or 2) in env(n), and
// compares every answer with the document. Its error lists every
// difference, each naming the document, the line of the step, the paste,
// what the document shows and what was answered. The results of both
// pastes are returned for further checks.
func Check(ctx context.Context, w Walkthrough, env func(paste int) (Env, error)) ([2][]Result, error) {
	var all [2][]Result
	var errs []error
	var prev []int64
	gw := w.talksToGateway()
	for paste := 1; paste <= 2; paste++ {
		e, err := env(paste)
		if err != nil {
			return all, err
		}
		res, err := Run(ctx, w, e)
		all[paste-1] = res
		if err != nil {
			return all, fmt.Errorf("%q, paste %d: %w", w.Heading, paste, err)
		}
		tk := &tokens{gateway: gw, pairs: map[string]int64{}}
		for _, r := range res {
			for _, d := range compareStep(r, tk) {
				errs = append(errs, fmt.Errorf("%s:%d (%q), paste %d: %s\n    command:   %s\n    docs show: %s\n    answered:  %s",
					w.Doc, r.Step.Line, w.Heading, paste, d, oneLine(r.Step.Command), oneLine(r.Step.Shown), oneLine(r.Output)))
			}
		}
		for _, d := range tk.orderErrors() {
			errs = append(errs, fmt.Errorf("%s:%d (%q), paste %d: %s", w.Doc, w.Line, w.Heading, paste, d))
		}
		now := tk.actual()
		if gw && len(prev) > 0 && len(now) > 0 && minOf(now) <= maxOf(prev) {
			errs = append(errs, fmt.Errorf("%s:%d (%q): the second paste's tokens %v do not all rise above the first's %v",
				w.Doc, w.Line, w.Heading, now, prev))
		}
		prev = now
	}
	return all, errors.Join(errs...)
}

func oneLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > 600 {
		s = s[:600] + "…(cut)"
	}
	return strings.ReplaceAll(s, "\n", "⏎ ")
}

func minOf(v []int64) int64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []int64) int64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
