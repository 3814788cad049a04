package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs the demo for a few seconds: three jobs share one simulated
// key, the provider refuses nothing, and every job finishes something.
func TestDemo(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	env := &cmdEnv{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	// Until every job has finished two articles, however slow the machine.
	code := runMain(context.Background(), env, []string{"demo", "--for", "5m", "--until-each", "2", "--report-every", "2s", "--addr", "", "--db", t.TempDir() + "/demo.db"})
	if code != 0 {
		t.Fatalf("demo exited %d: %s", code, errOut.String())
	}
	s := out.String()
	if !strings.Contains(s, "refused 0 (429/413)") {
		t.Fatalf("the provider refused calls:\n%s", s)
	}
	// The last progress table: every job has finished at least one article.
	last := s[strings.LastIndex(s, "job  priority"):]
	for _, job := range []string{"analysis", "summary", "title"} {
		m := regexp.MustCompile(`(?m)^\s*` + job + `\s+\d+\s+(\d+)\s+(\d+)`).FindStringSubmatch(last)
		if m == nil {
			t.Fatalf("no row for %s in:\n%s", job, last)
		}
		if done, _ := strconv.Atoi(m[2]); done < 2 {
			t.Errorf("job %s finished %d articles, want the demo to stop once each finished 2:\n%s", job, done, last)
		}
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	env := &cmdEnv{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	if code := runMain(context.Background(), env, []string{"demo", "--for", "-1s"}); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "--for and --report-every must be positive") {
		t.Fatalf("stderr %q does not say what is wrong", errOut.String())
	}
}
