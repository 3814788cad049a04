package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
)

func TestBenchEngine(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	env := &cmdEnv{stdout: &out, stderr: &errb, getenv: os.Getenv}
	if code := runMain(context.Background(), env, []string{"bench", "engine", "--runs", "20", "--json"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep engineReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	if rep.Runs != 20 || rep.SluiceRunsPS <= 0 || rep.DBOSRunsPS <= 0 || rep.Ratio <= 0 {
		t.Fatalf("report %+v", rep)
	}
}
